// The relay console: a page per hash route, each rendered from the JSON
// API of the same server. Every value from the API becomes a text node
// (h appends strings as text), never markup, so a row's topic or error
// shows as written.

const main = document.getElementById("main");
let generation = 0; // bumped on every route change: late answers of a left page are dropped
let timer = 0;

// h makes an element: attrs are attributes (on* are listeners), kids are
// nodes or strings (as text).
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid != null && kid !== false) el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

// visible shows control characters (escape sequences, NUL, newlines
// unless lines) as \u escapes instead of letting them vanish or reflow
// the page.
const visible = (s, lines = false) =>
  String(s ?? "").replace(lines ? /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/g : /[\u0000-\u001f\u007f-\u009f]/g,
    (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));

const num = (n) => (n == null ? "—" : Number(n).toLocaleString("en"));
const when = (t) => (t ? new Date(t).toISOString().slice(0, 19).replace("T", " ") + " UTC" : "—");

function age(s) {
  if (s == null) return "—";
  if (s <= 0) return "now";
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return (s / 60).toFixed(1) + " min";
  if (s < 86400) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

// text decodes JSON's base64 bytes as UTF-8 (lines kept when lines), or
// says they are binary.
function text(b64, lines = false) {
  if (b64 == null) return "(none)";
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  try {
    return visible(new TextDecoder("utf-8", { fatal: true }).decode(bytes), lines);
  } catch {
    return `(${bytes.length} bytes, not UTF-8; base64: ${b64})`;
  }
}

class AuthError extends Error {}

// api calls the console API with the token of this tab, if any.
async function api(path, body) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem("token");
  if (token) headers.Authorization = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method: body === undefined ? "GET" : "POST", headers, body: JSON.stringify(body) });
  const answer = await res.json().catch(() => ({ error: res.statusText }));
  if (res.status === 401) throw new AuthError(answer.error);
  if (!res.ok) throw Object.assign(new Error(answer.error || res.statusText), { status: res.status, answer });
  return answer;
}

// show makes kids the page, leaving out the nulls of absent parts.
const show = (...kids) => main.replaceChildren(...kids.filter((k) => k != null));

// table lays rows out under head; each cell carries its column's name
// (data-label), which narrow screens show beside it instead of a header.
function table(head, rows, empty = "None.") {
  if (rows.length === 0) return h("p", { class: "muted" }, empty);
  for (const r of rows) [...r.children].forEach((td, i) => td.setAttribute("data-label", head[i]));
  return h("div", { class: "scroll" },
    h("table", {}, h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))), h("tbody", {}, rows)));
}

const row = (attrs, ...cells) => h("tr", attrs, cells.map((c) => h("td", {}, c)));
const section = (title, ...kids) => h("section", {}, h("h2", {}, title), ...kids);

// chart draws the oldest due age of the samples as a line; a sample
// without due rows is 0.
function chart(samples) {
  if (samples.length < 2) return h("p", { class: "muted" }, "The chart fills as the console samples the table (every 30 s).");
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 600 100");
  svg.setAttribute("class", "chart");
  const t0 = Date.parse(samples[0].at), span = Math.max(1, Date.parse(samples.at(-1).at) - t0);
  const top = Math.max(1, ...samples.map((s) => s.oldest_due_seconds ?? 0));
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", samples.map((s) =>
    `${((Date.parse(s.at) - t0) / span * 600).toFixed(1)},${(98 - (s.oldest_due_seconds ?? 0) / top * 96).toFixed(1)}`).join(" "));
  svg.append(line);
  return h("figure", {}, svg, h("figcaption", {}, `Oldest due age, ${when(samples[0].at)} to now; top ${age(top)}.`));
}

async function overview(gen) {
  const [st, hist] = await Promise.all([api("/api/status"), api("/api/history")]);
  if (gen !== generation) return;
  const t = st.totals;
  const sent = t.sent == null ? "—" : (t.sent_exact ? "" : "≈ ") + num(t.sent);
  const card = (label, value, key) => h("div", { class: "card" }, h("span", {}, label), h("b", { "data-total": key }, value));
  const outage = st.sink_outage && !st.sink_outage.startsWith("unknown");
  show(
    h("h1", {}, "Overview of ", visible(st.table)),
    outage ? h("p", { class: "alert" }, "Sink outage: ", visible(st.sink_outage)) : null,
    h("div", { class: "cards" },
      card("Pending, due", num(t.pending_due), "pending_due"),
      card("Pending, later", num(t.pending_delayed), "pending_delayed"),
      card("Processing", num(t.processing), "processing"),
      card("Lease lapsed", num(t.lapsed), "lapsed"),
      card("Failed", num(t.failed), "failed"),
      card("Parked", num(t.parked), "parked"),
      card("Sent", sent, "sent"),
      card("Oldest due", age(st.oldest_due_seconds), "oldest_due")),
    chart(hist.samples),
    section("Backlog by topic", table(["Topic", "Due", "Later", "Processing", "Failed", "Oldest due"],
      st.topics.map((c) => row({ "data-topic": c.topic }, visible(c.topic), num(c.pending_due), num(c.pending_delayed),
        num(c.processing), num(c.failed), age(c.oldest_due_seconds))), "No pending, processing or failed rows.")),
    section("Relays and what they hold",
      table(["Relay", "Rows held", "Claims", "Leases end in"], st.holders.map((x) =>
        row({}, visible(x.relay), num(x.rows), num(x.claims), `${age(x.first_lease_end_seconds)} – ${age(x.last_lease_end_seconds)}`)),
        "No relay holds rows now."),
      table(["Relay", "Sent lately", "Last sent"], st.recent_senders.map((x) =>
        row({}, visible(x.relay), num(x.rows), age(x.last_sent_seconds) + " ago")), "No recent sends."),
      table(["Relay", "Connections", "Connected for", "Serves this table"], st.sessions.map((x) =>
        row({}, visible(x.relay), num(x.connections), age(x.connected_seconds), x.serves_table ? "yes" : "no")),
        st.sessions_note || "No relay is connected.")),
    st.ordered ? section(`Ordered delivery: ${st.ordered.shards} shards`,
      table(["Shard", "Held by", "Lease ends in", "In flight"], st.ordered.leased.map((x) =>
        row({}, x.shard, visible(x.held_by), age(x.lease_end_seconds), num(x.in_flight))), "No shard is leased.")) : null,
    section("Retention and jobs",
      table(["Job", "Last run by", "Running", "Next run in", "Deleted last", "Deleted in all"], st.jobs.map((j) =>
        row({}, j.job, visible(j.last_run_by), j.running ? "yes" : "no", age(j.next_run_seconds), num(j.last_deleted), num(j.total_deleted))),
        "No job has run."),
      st.partitions ? table(["Partition", "From", "To", "Rows (estimate)", "Size"], st.partitions.map((p) =>
        row({}, p.name, when(p.from), when(p.to), num(p.rows_estimate), (p.bytes / 1048576).toFixed(1) + " MiB"))) : null,
      h("p", { class: "muted" }, "Oldest sent row: ", when(st.oldest_sent_at), ". As of ", when(st.at), "; refreshed every 10 s.")));
  timer = setTimeout(() => gen === generation && overview(gen).catch((e) => fail(e, gen)), 10000);
}

async function groups(gen, params, note) {
  const { groups } = await api("/api/groups");
  if (gen !== generation) return;
  const panel = h("div", { id: "action" }, note || "");
  show(h("h1", {}, "Failure groups"),
    h("p", { class: "muted" }, "Failed rows grouped by topic, error class and error text with its values left out."),
    panel,
    table(["Rows", "Topic", "Class", "Error", "First failed", "Last failed", ""], groups.map((g) =>
      row({ "data-fp": g.fingerprint }, num(g.count), visible(g.topic), g.class, h("code", {}, visible(g.pattern)),
        when(g.first_failed), when(g.last_failed), h("span", { class: "actions" },
          h("a", { href: `#/failed?group=${g.fingerprint}` }, "Rows"),
          h("button", { "data-action": "retry", onclick: () => act(gen, panel, g, "retry") }, "Retry…"),
          h("button", { "data-action": "purge", onclick: () => act(gen, panel, g, "purge") }, "Purge…")))),
    "No failed rows."));
}

// act counts the group's rows (a dry run), asks the operator to confirm
// that count, and acts on at most that many.
async function act(gen, panel, g, action) {
  const path = `/api/groups/${g.fingerprint}/${action}`;
  try {
    const dry = await api(path, { dry_run: true });
    const verb = action === "retry" ? "Retry" : "Purge (delete)";
    panel.replaceChildren(h("div", { class: "confirm" },
      h("p", {}, `${verb} ${num(dry.rows)} failed rows of topic `, h("code", {}, visible(g.topic)), ` (group ${g.fingerprint})?`),
      h("button", { "data-confirm": action, onclick: () => confirmed(gen, path, action, dry.rows) }, `${verb} ${num(dry.rows)} rows`),
      h("button", { onclick: () => panel.replaceChildren() }, "Cancel")));
  } catch (e) {
    fail(e, gen, panel);
  }
}

async function confirmed(gen, path, action, n) {
  let note;
  try {
    const res = await api(path, { confirm: n });
    note = h("p", { class: "ok", id: "result" }, `${action === "retry" ? "Retried" : "Purged"} ${num(res.rows)} rows` +
      (res.left ? `; ${num(res.left)} more joined the group since and were left alone` : "") + ` (audit entry ${res.audit_id}).`);
  } catch (e) {
    if (e instanceof AuthError) return fail(e, gen);
    note = h("p", { class: "alert", id: "result" }, e.message);
  }
  if (gen === generation) await groups(gen, null, note).catch((e) => fail(e, gen));
}

async function failedRows(gen, params) {
  const q = new URLSearchParams();
  for (const k of ["group", "topic", "after"]) if (params.get(k)) q.set(k, params.get(k));
  const page = await api("/api/failed?" + q);
  if (gen !== generation) return;
  const next = new URLSearchParams(q);
  next.set("after", page.next);
  show(h("h1", {}, "Failed rows", params.get("group") ? ` of group ${params.get("group")}` : ""),
    table(["Id", "Topic", "Attempts", "Failed", "Error", "Payload"], page.rows.map((r) =>
      row({ "data-id": r.id }, h("a", { href: `#/rows/${r.id}` }, r.id), visible(r.topic), r.attempt, when(r.failed_at),
        h("span", { class: "error" }, visible(r.last_error)), num(r.payload_size) + " B")), "No failed rows."),
    page.next ? h("p", {}, h("a", { href: "#/failed?" + next }, "Next page")) : null);
}

async function rowDetail(gen, params, id) {
  const r = await api(`/api/failed/${encodeURIComponent(id)}`);
  if (gen !== generation) return;
  const payload = h("div", {}, h("button", { id: "show-payload", onclick: showPayload }, `Show payload (${num(r.payload_size)} bytes)`));
  async function showPayload() {
    try {
      const full = await api(`/api/failed/${encodeURIComponent(id)}?payload=1`);
      payload.replaceChildren(h("pre", { id: "payload" }, text(full.payload, true)));
    } catch (e) {
      fail(e, gen, payload);
    }
  }
  const field = (name, ...value) => [h("dt", {}, name), h("dd", {}, ...value)];
  show(h("h1", {}, "Failed row"),
    h("dl", {},
      field("Id", r.id), field("Topic", h("span", { id: "topic" }, visible(r.topic))), field("Key", text(r.key)),
      field("Headers", h("pre", { id: "headers" }, visible(JSON.stringify(r.headers, null, 2), true))),
      field("Attempts", r.attempt), field("Created", when(r.created_at)), field("Failed", when(r.failed_at)),
      field("Error", h("pre", { id: "error" }, visible(r.last_error, true))),
      field("Payload", payload)));
}

async function audit(gen, params) {
  const before = params.get("before");
  const page = await api("/api/audit" + (before ? "?before=" + encodeURIComponent(before) : ""));
  if (gen !== generation) return;
  show(h("h1", {}, "Audit log"),
    h("p", { class: "muted" }, "Every change made by relay failed, relay replay and this console, newest first."),
    table(["Entry", "At", "Who", "Action", "Rows", "Filter"], page.entries.map((e) =>
      row({}, e.id, when(e.at), visible(e.actor), e.action, num(e.rows), h("code", {}, visible(JSON.stringify(e.filter))))),
      "No changes yet."),
    page.next ? h("p", {}, h("a", { href: "#/audit?before=" + page.next }, "Older entries")) : null);
}

// fail shows an error where it happened, or the token form.
function fail(e, gen, where) {
  if (gen !== generation) return;
  if (e instanceof AuthError) return tokenForm(e.message);
  (where || main).replaceChildren(h("p", { class: "alert" }, e.message));
}

function tokenForm(why) {
  const input = h("input", { type: "password", id: "token", autocomplete: "off", placeholder: "token" });
  const use = (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("token", input.value.trim());
    route();
  };
  show(h("h1", {}, "Token needed"), h("p", {}, visible(why)),
    h("form", { onsubmit: use }, input, h("button", { type: "submit" }, "Use token")),
    h("p", { class: "muted" }, "The token stays in this tab only (session storage)."));
}

function header() {
  const who = document.getElementById("who");
  who.replaceChildren(sessionStorage.getItem("token")
    ? h("button", { onclick: () => { sessionStorage.removeItem("token"); route(); } }, "Forget token") : "");
}

const routes = [
  [/^\/?$/, overview],
  [/^\/groups$/, groups],
  [/^\/failed$/, failedRows],
  [/^\/rows\/([0-9a-fA-F-]{36})$/, rowDetail],
  [/^\/audit$/, audit],
];

function route() {
  const gen = ++generation;
  clearTimeout(timer);
  header();
  const [path, query] = location.hash.slice(1).split("?");
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("here", a.getAttribute("href") === "#" + (path || "/"));
  }
  for (const [re, page] of routes) {
    const m = re.exec(path);
    if (m) return page(gen, new URLSearchParams(query), ...m.slice(1)).catch((e) => fail(e, gen));
  }
  show(h("p", { class: "alert" }, "No such page."));
}

window.addEventListener("hashchange", route);
route();
