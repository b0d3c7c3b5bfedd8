package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/sinks"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Every registered sink has a name of its own, and every flag it adds is
// named after it, so that sinks cannot collide.
func TestSinkRegistry(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, s := range sinks.All() {
		if s.Name == "" || seen[s.Name] {
			t.Errorf("sink %q: empty or registered twice", s.Name)
		}
		seen[s.Name] = true
		f := newFlags("test", "", io.Discard, func(string) string { return "" })
		if s.Flags(f) == nil {
			t.Errorf("sink %s: flags returned no settings", s.Name)
		}
		f.fs.VisitAll(func(fl *flag.Flag) {
			if !strings.HasPrefix(fl.Name, s.Name+"-") {
				t.Errorf("sink %s registers --%s, which is not named --%s-...", s.Name, fl.Name, s.Name)
			}
		})
		if !strings.Contains(sinkHelp(), s.Name) || !strings.Contains(sinkNames(), s.Name) {
			t.Errorf("sink %s is missing from --sink's help %q or its error %q", s.Name, sinkHelp(), sinkNames())
		}
	}
}

func TestOrList(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"kafka"}, "kafka"},
		{[]string{"kafka", "stdout"}, "kafka or stdout"},
		{[]string{"kafka", "nats", "stdout"}, "kafka, nats or stdout"},
	} {
		if got := orList(c.in, " or "); got != c.want {
			t.Errorf("orList(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// writeTx writes msgs in one transaction, committed or rolled back, and
// returns them with the ids the writer gave them.
func writeTx(t *testing.T, w *outbox.Writer, pool *pgxpool.Pool, msgs []outbox.Message, commit bool) []outbox.Message {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := w.WriteBatch(ctx, tx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	out := slices.Clone(msgs)
	for i := range out {
		out[i].ID = res[i].ID
	}
	if commit {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// writeKeyRounds commits perKey rounds of one event for each of keys keys
// (customer-0, customer-1, ...) of topic, a transaction per round, so that
// each key's events interleave with the others'; it returns them in write
// order, with their ids.
func writeKeyRounds(t *testing.T, w *outbox.Writer, pool *pgxpool.Pool, topic string, keys, perKey int) []outbox.Message {
	t.Helper()
	var committed []outbox.Message
	for round := range perKey {
		batch := make([]outbox.Message, 0, keys)
		for k := range keys {
			batch = append(batch, outbox.Message{
				Topic: topic, Key: fmt.Appendf(nil, "customer-%d", k),
				Payload: fmt.Appendf(nil, `{"customer":%d,"seq":%d}`, k, round),
			})
		}
		committed = append(committed, writeTx(t, w, pool, batch, true)...)
	}
	return committed
}

// relay run warns at start for each sink in use whose
// --<sink>-tls-insecure-skip-verify is on, and only for those.
func TestInsecureTLSIsWarnedAtStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errOut syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--database-url", "postgres://127.0.0.1:1/db", "--route", "w.*=webhook", "--route", "*=stdout",
			"--webhook-url", "https://127.0.0.1:1/{topic}", "--webhook-tls-insecure-skip-verify", "--kafka-tls-insecure-skip-verify"},
			func(string) string { return "" }, &out, &errOut)
	}()
	await(t, 10*time.Second, func() bool { return strings.Contains(errOut.String(), "database unreachable; retrying") })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after cancel, want 0; stderr:\n%s", code, errOut.String())
	}
	logs := errOut.String()
	if !strings.Contains(logs, "level=WARN msg=\"TLS certificate verification is off") || !strings.Contains(logs, "flag=--webhook-tls-insecure-skip-verify") {
		t.Errorf("no warning for --webhook-tls-insecure-skip-verify:\n%s", logs)
	}
	if strings.Contains(logs, "flag=--kafka-tls-insecure-skip-verify") {
		t.Errorf("a warning for the kafka sink, which no route uses:\n%s", logs)
	}
}
