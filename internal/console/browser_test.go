package console_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/relay"
)

// The web console, driven in headless Chromium (Debian's chromium
// package; OUTBOX_TEST_CHROMIUM names another binary).

// browser starts Chromium at the given window size and returns the
// context chromedp actions run in; it ends with the test.
func browser(t *testing.T, width, height int) context.Context {
	t.Helper()
	path := os.Getenv("OUTBOX_TEST_CHROMIUM")
	if path == "" {
		var err error
		if path, err = exec.LookPath("chromium"); err != nil {
			t.Fatalf("chromium is not on PATH (%v): the web console's tests drive it; install it with `apt-get install chromium` or name a Chromium binary in OUTBOX_TEST_CHROMIUM", err)
		}
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(width, height))
	ctx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel = chromedp.NewContext(ctx)
	t.Cleanup(cancel)
	// A bound on the whole test, so that a page that never shows what
	// it waits for fails the test instead of hanging it.
	ctx, cancel = context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// run runs actions, failing the test with what for context.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	step, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(step, actions...); err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s: %v; the page says:\n%s", what, err, page)
	}
}

// read returns the value of action.
func read[T any](t *testing.T, ctx context.Context, action chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, action)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// css is a CSS selector's first match.
type css = chromedp.CSS

// signIn opens page and answers the token form with secret.
func signIn(t *testing.T, ctx context.Context, page, secret string) {
	t.Helper()
	run(t, ctx, "open "+page, chromedp.Navigate(page), chromedp.WaitVisible(css("#token")))
	if why := read(t, ctx, chromedp.Text(css("main p"))); !strings.Contains(why, "token is required") {
		t.Errorf("the token form says %q, want the API's refusal", why)
	}
	run(t, ctx, "sign in", chromedp.SendKeys(css("#token"), secret), chromedp.Click(css(`form button[type="submit"]`)))
}

// shoot saves the page as dir/name.png: docs/img with
// OUTBOX_CONSOLE_SCREENSHOTS=docs/img (make console-screenshots), the
// test's temporary directory otherwise.
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := t.TempDir()
	if d := os.Getenv("OUTBOX_CONSOLE_SCREENSHOTS"); d != "" {
		dir = d
	}
	png := read(t, ctx, chromedp.FullScreenshot(100))
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s: %d bytes, not a PNG", name, len(png))
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// rendered counts the elements made of row text, and says whether a
// script of it ran.
func rendered(t *testing.T, ctx context.Context) (made int, ran bool) {
	t.Helper()
	made = read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("main img, main b, main script").length`))
	return made, read(t, ctx, chromedp.Evaluate[bool](`window.pwned === 1`))
}

// markup is a topic and an error that a page must show as text.
const (
	markupTopic = `orders<img src=x onerror="window.pwned=1">`
	markupError = "kafka: \x1b[31m<b>refused</b>\x1b[0m <script>window.pwned=1</script>"
)

func TestBrowserShowsWhatSQLShows(t *testing.T) {
	b := setup(t, false)
	b.put(t, "pending", "orders.created", "", 12)
	b.put(t, "pending", "payments.captured", "", 7)
	b.put(t, "sent", "orders.created", "", 30)
	b.put(t, "failed", "payments.captured", "permanent: kafka: [3] Unknown Topic Or Partition", 5)
	b.put(t, "failed", "orders.created", "attempts exhausted: dial tcp 10.0.0.7:9092: i/o timeout", 3)
	ids := b.put(t, "failed", markupTopic, markupError, 1)
	ctx := browser(t, 1280, 900)

	// Without a token the API refuses, and the page asks for one.
	signIn(t, ctx, b.url+"/", writeSecret)
	run(t, ctx, "overview", chromedp.WaitVisible(css(`[data-total="pending_due"]`)))
	totals := read(t, ctx, chromedp.Evaluate[map[string]string](
		`Object.fromEntries([...document.querySelectorAll("[data-total]")].map(e => [e.dataset.total, e.textContent]))`))
	topics := read(t, ctx, chromedp.Evaluate[[][]string](
		`[...document.querySelectorAll("tr[data-topic]")].map(tr => [...tr.cells].map(c => c.textContent))`))
	var due, failed int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FILTER (WHERE status = 'pending' AND next_retry_at <= now()),
		count(*) FILTER (WHERE status = 'failed') FROM `+b.table.Ident()).Scan(&due, &failed); err != nil {
		t.Fatal(err)
	}
	if totals["pending_due"] != strconv.Itoa(due) || totals["failed"] != strconv.Itoa(failed) || totals["sent"] != "30" {
		t.Errorf("overview totals %v; SQL: %d due, %d failed, 30 sent", totals, due, failed)
	}
	rows, err := b.pool.Query(b.ctx, `SELECT topic, count(*) FILTER (WHERE status = 'pending')::text, count(*) FILTER (WHERE status = 'failed')::text
		FROM `+b.table.Ident()+` WHERE status <> 'sent' GROUP BY topic ORDER BY topic`)
	if err != nil {
		t.Fatal(err)
	}
	var want [][]string
	for rows.Next() {
		var topic, pending, failed string
		if err := rows.Scan(&topic, &pending, &failed); err != nil {
			t.Fatal(err)
		}
		want = append(want, []string{topic, pending, failed})
	}
	var got [][]string
	for _, c := range topics { // Topic, Due, Later, Processing, Failed, Oldest due
		got = append(got, []string{c[0], c[1], c[4]})
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("overview by topic %q, SQL %q", got, want)
	}
	shoot(t, ctx, "console-overview")

	// A topic and an error holding markup and escape sequences render as
	// text: no element is made of them, no script of theirs runs.
	run(t, ctx, "groups", chromedp.Navigate(b.url+"/#/groups"), chromedp.WaitVisible(css("tr[data-fp]")))
	groupTopics := read(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr[data-fp]")].map(tr => tr.cells[1].textContent)`))
	made, pwned := rendered(t, ctx)
	if !slices.Contains(groupTopics, markupTopic) || made != 0 || pwned {
		t.Errorf("groups page: topics %q (want %q among them), %d elements made of row text, script ran: %v", groupTopics, markupTopic, made, pwned)
	}
	shoot(t, ctx, "console-groups")
	run(t, ctx, "a phone's screen", chromedp.EmulateViewport(390, 844))
	shoot(t, ctx, "console-phone")
	run(t, ctx, "a laptop's screen", chromedp.EmulateViewport(1280, 800))
	run(t, ctx, "row", chromedp.Navigate(b.url+"/#/rows/"+ids[0]), chromedp.WaitVisible(css("#error")))
	topic, shown := read(t, ctx, chromedp.TextContent(css("#topic"))), read(t, ctx, chromedp.TextContent(css("#error")))
	made, pwned = rendered(t, ctx)
	wantShown := `kafka: \u001b[31m<b>refused</b>\u001b[0m <script>window.pwned=1</script>`
	if topic != markupTopic || shown != wantShown || made != 0 || pwned {
		t.Errorf("row page: topic %q, error %q (want %q), %d elements made of row text, script ran: %v", topic, shown, wantShown, made, pwned)
	}
	if headers := read(t, ctx, chromedp.TextContent(css("#headers"))); headers != "{\n  \"h\": \"v\"\n}" {
		t.Errorf("headers shown as %q, want the JSON indented over lines", headers)
	}
	run(t, ctx, "payload", chromedp.Click(css("#show-payload")), chromedp.WaitVisible(css("#payload")))
	if payload := read(t, ctx, chromedp.TextContent(css("#payload"))); payload != "payload 0" {
		t.Errorf("payload shown %q, want %q", payload, "payload 0")
	}
	shoot(t, ctx, "console-row")
}

func TestBrowserRetryOfAGroupIsPublished(t *testing.T) {
	b := setup(t, false)
	const topic = "payments.captured"
	br, err := kfakebroker.Start(kfakebroker.Options{}) // no topics: publishing to one fails for good
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(br.Close)
	pub, err := kafka.New(kafka.Config{Brokers: br.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	r, err := relay.New(b.pool, pub, relay.Config{Table: b.table, PollInterval: 10 * time.Millisecond, BackoffMin: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("relay: %v", err)
		}
	})
	ids := b.put(t, "pending", topic, "", 4)
	await(t, "the relay fails the rows of a topic the broker lacks", func() bool { return b.status(t, ids[3]) == "failed" && b.status(t, ids[0]) == "failed" })

	// The cause fixed: the topic exists now.
	client := &kafkago.Client{Addr: kafkago.TCP(br.Addrs()...)}
	res, err := client.CreateTopics(b.ctx, &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{{Topic: topic, NumPartitions: 1, ReplicationFactor: 1}}})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}

	bctx := browser(t, 1280, 900)
	signIn(t, bctx, b.url+"/#/groups", writeSecret)
	run(t, bctx, "retry the group", chromedp.WaitVisible(css(`button[data-action="retry"]`)),
		chromedp.Click(css(`button[data-action="retry"]`)), chromedp.WaitVisible(css(`button[data-confirm="retry"]`)))
	if asked := read(t, bctx, chromedp.TextContent(css(`button[data-confirm="retry"]`))); asked != "Retry 4 rows" {
		t.Errorf("confirm button %q, want the dry run's count: Retry 4 rows", asked)
	}
	shoot(t, bctx, "console-confirm")
	run(t, bctx, "confirm", chromedp.Click(css(`button[data-confirm="retry"]`)), chromedp.WaitVisible(css("#result")))
	if result := read(t, bctx, chromedp.TextContent(css("#result"))); !strings.HasPrefix(result, "Retried 4 rows") {
		t.Errorf("result %q, want Retried 4 rows", result)
	}
	await(t, "the relay publishes the retried rows", func() bool { return b.status(t, ids[0]) == "sent" && b.status(t, ids[3]) == "sent" })
	var got []string
	for _, rec := range kafkatest.ReadTopic(t, br.Addrs(), topic, nil) {
		got = append(got, rec.EventID())
	}
	slices.Sort(got)
	if !slices.Equal(got, slices.Sorted(slices.Values(ids))) {
		t.Errorf("the broker holds events %q, want the group's %q", got, ids)
	}
	if trail := b.audit(t); !slices.Equal(trail, []string{"console:alice failed.retry 4"}) {
		t.Errorf("audit trail %q", trail)
	}
	run(t, bctx, "audit log", chromedp.Navigate(b.url+"/#/audit"), chromedp.WaitVisible(css("main tbody tr")))
	entry := read(t, bctx, chromedp.Evaluate[[]string](`[...document.querySelector("main tbody tr").cells].map(c => c.textContent)`))
	if len(entry) != 6 || entry[2] != "console:alice" || entry[3] != "failed.retry" || entry[4] != "4" {
		t.Errorf("the audit log's newest entry %q, want console:alice failed.retry 4", entry)
	}
	shoot(t, bctx, "console-audit")
}

// await waits until cond holds; the test's deadline bounds it.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if dl, ok := t.Deadline(); ok && time.Until(dl) < 5*time.Second {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
