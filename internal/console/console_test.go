package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/internal/console"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

const (
	writeSecret = "alice-secret-0123456789"
	readSecret  = "bob-secret-0123456789"
)

// bundle is a migrated table, an Admin on it and the console serving it.
type bundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	table outbox.Table
	adm   *admin.Admin
	url   string
}

// setup serves the console with alice (write) and bob (read), or with
// no tokens when open.
func setup(t *testing.T, open bool) *bundle {
	t.Helper()
	pool, table := testdb.New(t)
	adm, err := admin.New(pool, admin.Config{Table: table, Actor: "console"})
	if err != nil {
		t.Fatal(err)
	}
	var tokens console.Tokens
	if !open {
		if tokens, err = console.ParseTokens("alice:write:" + writeSecret + "\nbob:read:" + readSecret + "\n"); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(console.Handler(adm, tokens))
	t.Cleanup(srv.Close)
	return &bundle{ctx: context.Background(), pool: pool, table: table, adm: adm, url: srv.URL}
}

// put inserts rows of status with topic and last_error, failed now when
// failed, and returns their ids in order.
func (b *bundle) put(t *testing.T, status, topic, lastError string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := uuid.Must(uuid.NewV7()).String()
		_, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table.Ident()+`
			(id, topic, payload, headers, status, attempt, next_retry_at, last_error, created_at, failed_at)
			VALUES ($1, $2, $3, '{"h": "v"}', $4, 5, now(), $5, now(), CASE WHEN $4 = 'failed' THEN now() END)`,
			id, topic, fmt.Appendf(nil, "payload %d", i), status, lastError)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// status returns a row's status, or "gone".
func (b *bundle) status(t *testing.T, id string) string {
	t.Helper()
	var s string
	if err := b.pool.QueryRow(b.ctx, "SELECT status FROM "+b.table.Ident()+" WHERE id = $1", id).Scan(&s); err != nil {
		return "gone"
	}
	return s
}

// audit returns the audit trail's entries as "actor action rows".
func (b *bundle) audit(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, "SELECT actor || ' ' || action || ' ' || row_count FROM "+b.table.Related("audit")+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// do sends a request with the token (none if empty) and returns the
// status and body; it checks the headers every answer carries.
func (b *bundle) do(t *testing.T, method, path, token, contentType, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(b.ctx, method, b.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct, ns := resp.Header.Get("Content-Type"), resp.Header.Get("X-Content-Type-Options"); ct != "application/json" || ns != "nosniff" {
		t.Errorf("%s %s: Content-Type %q, X-Content-Type-Options %q", method, path, ct, ns)
	}
	return resp.StatusCode, out
}

// get is a GET that must answer 200, decoded into v.
func (b *bundle) get(t *testing.T, path, token string, v any) {
	t.Helper()
	code, body := b.do(t, "GET", path, token, "", "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
}

// sameJSON fails unless got is the JSON of want.
func sameJSON(t *testing.T, what string, got json.RawMessage, want any) {
	t.Helper()
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var g bytes.Buffer
	if err := json.Compact(&g, got); err != nil {
		t.Fatal(err)
	}
	if g.String() != string(w) {
		t.Errorf("%s:\n got %s\nwant %s", what, g.String(), w)
	}
}

const timeout = "webhook: POST http://10.0.0.%d/hooks: timed out"

func TestEndpointsAnswerWhatAdminGives(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	orders := b.put(t, "failed", "orders", fmt.Sprintf(timeout, 1), 3)
	b.put(t, "failed", "payments", "permanent: no route", 1)
	b.put(t, "pending", "orders", "", 2)

	var st admin.Status
	b.get(t, "/api/status", readSecret, &st)
	want, err := b.adm.Status(b.ctx, admin.StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Totals.Failed != 4 || st.Totals.PendingDue != 2 || !slices.EqualFunc(st.Topics, want.Topics, func(a, b admin.TopicCounts) bool {
		return a.Topic == b.Topic && a.Failed == b.Failed && a.PendingDue == b.PendingDue
	}) {
		t.Errorf("status: totals %+v topics %+v; admin gives %+v %+v", st.Totals, st.Topics, want.Totals, want.Topics)
	}

	var page struct {
		Rows json.RawMessage `json:"rows"`
		Next string          `json:"next"`
	}
	b.get(t, "/api/failed?topic=orders&limit=2", readSecret, &page)
	rows, next, err := b.adm.ListFailed(b.ctx, admin.Filter{Topics: []string{"orders"}}, admin.Page{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "page 1", page.Rows, rows)
	if page.Next != next || next != orders[1] {
		t.Errorf("next %q, admin gives %q, want %q", page.Next, next, orders[1])
	}
	if bytes.Contains(page.Rows, []byte(`"payload"`)) {
		t.Errorf("the list carries payloads: %s", page.Rows)
	}
	b.get(t, "/api/failed?topic=orders&limit=2&after="+next, readSecret, &page)
	rows, _, _ = b.adm.ListFailed(b.ctx, admin.Filter{Topics: []string{"orders"}}, admin.Page{Limit: 2, After: next})
	sameJSON(t, "page 2", page.Rows, rows)
	if page.Next != "" || len(rows) != 1 {
		t.Errorf("page 2: next %q, %d rows", page.Next, len(rows))
	}

	var groups struct {
		Groups json.RawMessage `json:"groups"`
	}
	b.get(t, "/api/groups", readSecret, &groups)
	wantGroups, err := b.adm.FailureGroups(b.ctx, admin.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "groups", groups.Groups, wantGroups)
	if len(wantGroups) != 2 {
		t.Errorf("%d groups, want 2", len(wantGroups))
	}
	b.get(t, "/api/failed?group="+wantGroups[0].Fingerprint, readSecret, &page)
	rows, _, _ = b.adm.ListFailed(b.ctx, admin.Filter{Group: wantGroups[0].Fingerprint}, admin.Page{})
	sameJSON(t, "a group's rows", page.Rows, rows)

	// One row: its payload only for a write token that asks.
	var one admin.FailedRow
	b.get(t, "/api/failed/"+orders[0], readSecret, &one)
	if one.ID != orders[0] || one.Topic != "orders" || one.Payload != nil || one.PayloadSize != len("payload 0") {
		t.Errorf("row %+v", one)
	}
	if code, body := b.do(t, "GET", "/api/failed/"+orders[0]+"?payload=1", readSecret, "", ""); code != http.StatusForbidden {
		t.Errorf("a payload for a read token: %d %s", code, body)
	}
	b.get(t, "/api/failed/"+orders[0]+"?payload=1", writeSecret, &one)
	if string(one.Payload) != "payload 0" {
		t.Errorf("payload %q", one.Payload)
	}
	for path, want := range map[string]int{
		"/api/failed/" + uuid.NewString(): http.StatusNotFound,
		"/api/failed/nope":                http.StatusBadRequest,
		"/api/failed?limit=100000":        http.StatusBadRequest,
		"/api/failed?group=zz":            http.StatusBadRequest,
		"/api/nothing":                    http.StatusNotFound,
	} {
		if code, body := b.do(t, "GET", path, readSecret, "", ""); code != want || !bytes.Contains(body, []byte(`"error"`)) {
			t.Errorf("GET %s: %d %s, want %d and an error", path, code, body, want)
		}
	}
}

func TestTokensAndRoles(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	ids := b.put(t, "failed", "orders", "boom", 1)
	fp := admin.Fingerprint("orders", "boom")
	for _, token := range []string{"", "not-a-token-of-ours-at-all", writeSecret + "x"} {
		if code, body := b.do(t, "GET", "/api/status", token, "", ""); code != http.StatusUnauthorized {
			t.Errorf("token %q: %d %s, want 401", token, code, body)
		}
	}
	req, _ := http.NewRequest("GET", b.url+"/api/status", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
		t.Errorf("WWW-Authenticate %q", got)
	}
	code, body := b.do(t, "POST", "/api/groups/"+fp+"/retry", readSecret, "application/json", `{"confirm": 1}`)
	if code != http.StatusForbidden || b.status(t, ids[0]) != "failed" || len(b.audit(t)) != 0 {
		t.Errorf("retry with a read token: %d %s; row %s, audit %q", code, body, b.status(t, ids[0]), b.audit(t))
	}
	// A form post (what a cross-site page can send) is refused.
	code, body = b.do(t, "POST", "/api/groups/"+fp+"/retry", writeSecret, "application/x-www-form-urlencoded", `confirm=1`)
	if code != http.StatusUnsupportedMediaType || b.status(t, ids[0]) != "failed" {
		t.Errorf("a form post: %d %s", code, body)
	}
}

func TestGroupRetryNeedsTheConfirmedCount(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	var group []string
	for i := range 3 {
		group = append(group, b.put(t, "failed", "orders", fmt.Sprintf(timeout, i+1), 1)...)
	}
	other := b.put(t, "failed", "orders", "permanent: no route", 1)
	fp := admin.Fingerprint("orders", fmt.Sprintf(timeout, 1))
	post := func(action, body string) (int, []byte) {
		return b.do(t, "POST", "/api/groups/"+fp+"/"+action, writeSecret, "application/json", body)
	}
	unchanged := func(when string) {
		t.Helper()
		for _, id := range append(slices.Clone(group), other...) {
			if s := b.status(t, id); s != "failed" {
				t.Errorf("%s: row %s is %s", when, id, s)
			}
		}
		if a := b.audit(t); len(a) != 0 {
			t.Errorf("%s: audit %q", when, a)
		}
	}

	code, body := post("retry", `{"dry_run": true}`)
	var res admin.Result
	if err := json.Unmarshal(body, &res); err != nil || code != http.StatusOK || !res.DryRun || res.Rows != 3 {
		t.Fatalf("dry run: %d %s", code, body)
	}
	unchanged("after the dry run")

	code, body = post("retry", `{"confirm": 2}`)
	var refusal struct {
		Error string `json:"error"`
		Rows  int64  `json:"rows"`
	}
	if err := json.Unmarshal(body, &refusal); err != nil || code != http.StatusConflict || refusal.Rows != 3 ||
		!strings.Contains(refusal.Error, "3 failed rows now, not the 2 confirmed: nothing changed") {
		t.Errorf("wrong count: %d %s", code, body)
	}
	for _, bad := range []string{`{}`, `{"confirm": 3, "dryrun": true}`, `not json`} {
		if code, body := post("retry", bad); code != http.StatusBadRequest {
			t.Errorf("body %s: %d %s, want 400", bad, code, body)
		}
	}
	if code, body := post("reset", `{"confirm": 3}`); code != http.StatusNotFound {
		t.Errorf("an unknown action: %d %s", code, body)
	}
	unchanged("after the refusals")

	code, body = post("retry", `{"confirm": 3}`)
	res = admin.Result{}
	if err := json.Unmarshal(body, &res); err != nil || code != http.StatusOK {
		t.Fatalf("retry: %d %s", code, body)
	}
	if res.Action != "failed.retry" || res.Rows != 3 || !slices.Equal(res.IDs, group) || res.AuditID == 0 {
		t.Errorf("retry: %+v, want the ids %v", res, group)
	}
	for _, id := range group {
		if s := b.status(t, id); s != "pending" {
			t.Errorf("retried row %s is %s", id, s)
		}
	}
	if s := b.status(t, other[0]); s != "failed" {
		t.Errorf("the other group's row is %s", s)
	}
	if a := b.audit(t); !slices.Equal(a, []string{"console:alice failed.retry 3"}) {
		t.Errorf("audit %q", a)
	}

	otherFP := admin.Fingerprint("orders", "permanent: no route")
	code, body = b.do(t, "POST", "/api/groups/"+otherFP+"/purge", writeSecret, "application/json; charset=utf-8", `{"confirm": 1}`)
	if code != http.StatusOK || b.status(t, other[0]) != "gone" {
		t.Errorf("purge: %d %s; row %s", code, body, b.status(t, other[0]))
	}
}

// auditAnswer is the answer of GET /api/audit.
type auditAnswer struct {
	Entries []admin.AuditEntry `json:"entries"`
	Next    int64              `json:"next"`
}

// entries returns audit entries as "actor action rows".
func entries(es []admin.AuditEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s %s %d", e.Actor, e.Action, e.Rows))
	}
	return out
}

func TestAuditListsTheChangesNewestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	if code, body := b.do(t, "GET", "/api/audit", readSecret, "", ""); code != http.StatusOK || string(body) != `{"entries":[],"next":0}`+"\n" {
		t.Errorf("an empty trail: %d %s", code, body)
	}
	b.put(t, "failed", "orders", "boom", 2)
	b.put(t, "failed", "payments", "no route", 1)
	for _, c := range []struct{ fp, action, body string }{
		{admin.Fingerprint("orders", "boom"), "retry", `{"confirm": 2}`},
		{admin.Fingerprint("payments", "no route"), "purge", `{"confirm": 1}`},
	} {
		if code, body := b.do(t, "POST", "/api/groups/"+c.fp+"/"+c.action, writeSecret, "application/json", c.body); code != http.StatusOK {
			t.Fatalf("%s: %d %s", c.action, code, body)
		}
	}

	// A read token reads the trail, a page at a time.
	var page auditAnswer
	b.get(t, "/api/audit?limit=1", readSecret, &page)
	if got := entries(page.Entries); !slices.Equal(got, []string{"console:alice failed.purge 1"}) || page.Next != page.Entries[0].ID {
		t.Fatalf("page 1: %q, next %d", got, page.Next)
	}
	b.get(t, fmt.Sprintf("/api/audit?limit=1&before=%d", page.Next), readSecret, &page)
	if got := entries(page.Entries); !slices.Equal(got, []string{"console:alice failed.retry 2"}) || page.Next != 0 {
		t.Errorf("page 2: %q, next %d", got, page.Next)
	}
	var raw struct {
		Entries json.RawMessage `json:"entries"`
	}
	b.get(t, "/api/audit", readSecret, &raw)
	want, _, err := b.adm.AuditLog(b.ctx, admin.AuditPage{})
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "the trail", raw.Entries, want)
	for _, path := range []string{"/api/audit?before=x", "/api/audit?before=0", "/api/audit?limit=0", "/api/audit?limit=1001"} {
		if code, body := b.do(t, "GET", path, readSecret, "", ""); code != http.StatusBadRequest || !bytes.Contains(body, []byte(`"error"`)) {
			t.Errorf("GET %s: %d %s, want 400 and an error", path, code, body)
		}
	}
}

func TestReplayNeedsTheConfirmedCount(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	orders := b.put(t, "sent", "orders", "", 3)
	payments := b.put(t, "sent", "payments", "", 1)
	b.put(t, "pending", "orders", "", 1)
	filter := fmt.Sprintf(`"topics": ["orders"], "created": {"from": %q}`, time.Now().Add(-time.Hour).Format(time.RFC3339))
	post := func(token, contentType, body string) (int, []byte) {
		return b.do(t, "POST", "/api/replay", token, contentType, body)
	}
	unchanged := func(when string) {
		t.Helper()
		for _, id := range append(slices.Clone(orders), payments...) {
			if s := b.status(t, id); s != "sent" {
				t.Errorf("%s: row %s is %s", when, id, s)
			}
		}
		if a := b.audit(t); len(a) != 0 {
			t.Errorf("%s: audit %q", when, a)
		}
	}

	if code, body := post(readSecret, "application/json", `{`+filter+`, "confirm": 3}`); code != http.StatusForbidden {
		t.Errorf("a read token: %d %s", code, body)
	}
	if code, body := post(writeSecret, "text/plain", `{`+filter+`, "confirm": 3}`); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d %s", code, body)
	}
	code, body := post(writeSecret, "application/json", `{`+filter+`, "dry_run": true}`)
	var res admin.Result
	if err := json.Unmarshal(body, &res); err != nil || code != http.StatusOK || !res.DryRun || res.Action != "replay" || res.Rows != 3 {
		t.Errorf("dry run: %d %s", code, body)
	}
	code, body = post(writeSecret, "application/json", `{`+filter+`, "confirm": 2}`)
	var refusal struct {
		Error string `json:"error"`
		Rows  int64  `json:"rows"`
	}
	if err := json.Unmarshal(body, &refusal); err != nil || code != http.StatusConflict || refusal.Rows != 3 ||
		!strings.Contains(refusal.Error, "the filter matches 3 sent rows now, not the 2 confirmed: nothing changed") {
		t.Errorf("wrong count: %d %s", code, body)
	}
	for bad, want := range map[string]int{
		`{"topics": ["orders"], "confirm": 3}`:                                        http.StatusBadRequest, // no time range
		`{"ids": ["nope"], "confirm": 1}`:                                             http.StatusBadRequest,
		`{"topics": ["orders"], "created": {"from": "1h"}, "confirm": 3}`:             http.StatusBadRequest,
		`{"topics": ["orders"], "sent": {"to": "2026-01-01T00:00:00Z"}}`:              http.StatusBadRequest, // no confirm
		`{"ids": ["` + uuid.NewString() + `", "` + orders[0] + `"], "dry_run": true}`: http.StatusNotFound,
	} {
		if code, body := post(writeSecret, "application/json", bad); code != want || !bytes.Contains(body, []byte(`"error"`)) {
			t.Errorf("body %s: %d %s, want %d and an error", bad, code, body, want)
		}
	}
	unchanged("after the refusals")

	code, body = post(writeSecret, "application/json", `{`+filter+`, "confirm": 3}`)
	res = admin.Result{}
	if err := json.Unmarshal(body, &res); err != nil || code != http.StatusOK {
		t.Fatalf("replay: %d %s", code, body)
	}
	if res.Action != "replay" || res.Rows != 3 || !slices.Equal(res.IDs, orders) || res.AuditID == 0 {
		t.Errorf("replay: %+v, want the ids %v", res, orders)
	}
	for _, id := range orders {
		if s := b.status(t, id); s != "pending" {
			t.Errorf("replayed row %s is %s", id, s)
		}
	}
	if s := b.status(t, payments[0]); s != "sent" {
		t.Errorf("the other topic's row is %s", s)
	}
	var page auditAnswer
	b.get(t, "/api/audit", readSecret, &page)
	if got := entries(page.Entries); !slices.Equal(got, []string{"console:alice replay 3"}) || page.Entries[0].ID != res.AuditID {
		t.Errorf("audit %q", got)
	}
}

// Text from the table reaches a client as JSON-escaped text: no markup,
// no terminal escape sequences, whatever a producer wrote.
func TestHostileTextIsEscaped(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	const topic = `<script>alert("topic")</script>`
	const lastError = "\x1b[31m<script>alert(1)</script>\x1b]0;title\x07 & more"
	id := b.put(t, "failed", topic, lastError, 1)[0]
	for _, path := range []string{"/api/failed", "/api/failed/" + id, "/api/groups", "/api/status"} {
		code, body := b.do(t, "GET", path, readSecret, "", "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		if bytes.Contains(body, []byte("<script>")) || bytes.ContainsAny(body, "\x1b\x07<>") {
			t.Errorf("GET %s: raw markup or control characters in %q", path, body)
		}
		if !bytes.Contains(body, []byte(`\u003cscript\u003e`)) {
			t.Errorf("GET %s: the topic is not there escaped: %s", path, body)
		}
	}
	var row admin.FailedRow
	b.get(t, "/api/failed/"+id, readSecret, &row)
	if row.Topic != topic || row.LastError != lastError {
		t.Errorf("decoded %q %q", row.Topic, row.LastError)
	}
}

// Without tokens the console serves loopback clients that name a loopback
// host, and acts as console:loopback.
func TestLoopbackWithoutTokens(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	ids := b.put(t, "failed", "orders", "boom", 2)
	code, body := b.do(t, "POST", "/api/groups/"+admin.Fingerprint("orders", "boom")+"/retry", "", "application/json", `{"confirm": 2}`)
	if code != http.StatusOK || b.status(t, ids[0]) != "pending" || !slices.Equal(b.audit(t), []string{"console:loopback failed.retry 2"}) {
		t.Errorf("retry: %d %s; audit %q", code, body, b.audit(t))
	}
	h := console.Handler(b.adm, nil)
	for _, c := range []struct{ remote, host string }{
		{"10.0.0.7:4000", "127.0.0.1:8089"},      // a remote client
		{"127.0.0.1:4000", "evil.example:8089"},  // DNS rebinding
		{"[::1]:4000", "localhost.evil.example"}, // not localhost
	} {
		req := httptest.NewRequest("GET", "/api/status", nil)
		req.RemoteAddr, req.Host = c.remote, c.host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden {
			t.Errorf("%+v: %d %s", c, rec.Code, rec.Body)
		}
	}
	req := httptest.NewRequest("GET", "/api/failed", nil)
	req.RemoteAddr, req.Host = "[::1]:4000", "[::1]:8089"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("::1: %d %s", rec.Code, rec.Body)
	}
}

func TestPageNeedsNoTokenTheAPIDoes(t *testing.T) {
	b := setup(t, false)
	for path, want := range map[string]string{"/": "text/html; charset=utf-8", "/assets/console.js": "text/javascript; charset=utf-8", "/assets/console.css": "text/css; charset=utf-8"} {
		resp, err := http.Get(b.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != want || len(body) == 0 {
			t.Errorf("GET %s without a token: %d %q, %d bytes; want 200 %q", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body), want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); path == "/" && !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("the page's Content-Security-Policy %q lets no script of its own run, or others", csp)
		}
	}
	if code, _ := b.do(t, "GET", "/api/history", "", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /api/history without a token: %d, want 401", code)
	}
}

func TestHistorySamplesTheBacklog(t *testing.T) {
	pool, table := testdb.New(t)
	adm, err := admin.New(pool, admin.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	srv := console.Handler(adm, nil)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	b := &bundle{ctx: context.Background(), pool: pool, table: table, adm: adm, url: ts.URL}
	b.put(t, "pending", "orders", "", 3)
	ctx, stop := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { srv.Sample(ctx, time.Millisecond); close(done) }()
	var h struct {
		Samples []console.Sample `json:"samples"`
	}
	await(t, "two samples", func() bool {
		b.get(t, "/api/history", "", &h)
		return len(h.Samples) >= 2
	})
	stop()
	<-done
	if s := h.Samples[0]; s.PendingDue != 3 || s.OldestDueSeconds == nil || !s.At.Before(h.Samples[1].At) {
		t.Errorf("samples %+v, want 3 due rows, an oldest due age, oldest first", h.Samples)
	}
}
