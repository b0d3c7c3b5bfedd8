package webhook_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/inbox/webhook"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	sink "github.com/outboxrelay/outboxrelay/publishers/webhook"
	"github.com/outboxrelay/outboxrelay/relay"
)

// answer is what the handler answered to one request.
type answer struct {
	id        string
	status    int
	duplicate string
}

// recorded is a request the handler answered, kept to be sent again.
type recorded struct {
	header http.Header
	body   []byte
}

// TestExampleWebhookReceiver is Example with every answer checked: a real
// relay with the webhook sink delivers events written with outbox.Write
// to the handler, whose process applies one effect per event through the
// inbox on PostgreSQL; a replay, and the first requests sent again byte
// for byte, are answered 204 with Inbox-Duplicate and apply nothing more.
func TestExampleWebhookReceiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table := testdb.New(t)
	inboxTable := outbox.Table{Schema: table.Schema}
	if _, err := migrations.UpInbox(ctx, pool, inboxTable); err != nil {
		t.Fatal(err)
	}
	effects := pgx.Identifier{table.Schema, "effects"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+effects+" (event_id uuid NOT NULL, topic text NOT NULL, payload bytea NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{Consumer: "test", Table: inboxTable})
	if err != nil {
		t.Fatal(err)
	}
	handler, err := webhook.NewHandler(webhook.Config{Secrets: []string{newSecret}}, func(ctx context.Context, m inbox.Message) (bool, error) {
		return in.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (event_id, topic, payload) VALUES ($1, $2, $3)", m.ID, m.Topic, m.Payload)
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		answers  []answer
		requests []recorded
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, r)
		mu.Lock()
		answers = append(answers, answer{r.Header.Get(sink.HeaderWebhookID), rec.Code, rec.Header().Get(webhook.HeaderDuplicate)})
		requests = append(requests, recorded{r.Header.Clone(), body})
		mu.Unlock()
		for name, v := range rec.Header() {
			w.Header()[name] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	takeAnswers := func() []answer {
		mu.Lock()
		defer mu.Unlock()
		out := answers
		answers = nil
		return out
	}

	// Events of two topics, with and without a key, in one transaction.
	writer, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, m := range []outbox.Message{
		{Topic: "orders.created", Key: []byte("customer-1"), Payload: []byte(`{"order":1}`)},
		{Topic: "orders.created", Key: []byte("customer-1"), Payload: []byte(`{"order":2}`)},
		{Topic: "orders.created", Payload: []byte(`{"order":3}`)},
		{Topic: "invoices.issued", Key: []byte{0xff, 0x01}, Payload: []byte{0x00, 0xff}},
	} {
		res, err := writer.Write(ctx, tx, m)
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		ids = append(ids, res.ID.String())
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	publisher, err := sink.New(sink.Config{URL: srv.URL + "/hooks/{topic}", Secrets: []string{oldSecret, newSecret}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { publisher.Close() })
	r, err := relay.New(pool, publisher, relay.Config{Table: table, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	checkEffects := func(when string) {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT event_id::text, count(*) FROM "+effects+" GROUP BY event_id")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		var id string
		var n int
		if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { got[id] = n; return nil }); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if got[id] != 1 {
				t.Errorf("%s: event %s has %d effects, want 1", when, id, got[id])
			}
		}
		if len(got) != len(ids) {
			t.Errorf("%s: effects of %d events, want %d", when, len(got), len(ids))
		}
	}
	checkAnswers := func(when string, want string) {
		t.Helper()
		as := takeAnswers()
		seen := map[string]bool{}
		for _, a := range as {
			seen[a.id] = true
			if a.status != http.StatusNoContent || a.duplicate != want {
				t.Errorf("%s: event %s answered %d, %s %q; want 204, %q", when, a.id, a.status, webhook.HeaderDuplicate, a.duplicate, want)
			}
		}
		if len(as) != len(ids) || len(seen) != len(ids) {
			t.Errorf("%s: %d answers for %d events, want one for each of %d", when, len(as), len(seen), len(ids))
		}
	}

	testdb.AwaitSent(t, pool, table, len(ids), 0)
	checkAnswers("delivery", "")
	checkEffects("delivery")

	adm, err := admin.New(pool, admin.Config{Table: table, Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := adm.Replay(ctx, admin.ReplayFilter{IDs: ids}, admin.ActionOptions{})
	if err != nil || res.Rows != int64(len(ids)) {
		t.Fatalf("replay: %d rows, %v; want %d", res.Rows, err, len(ids))
	}
	testdb.AwaitSent(t, pool, table, len(ids), 0)
	checkAnswers("replay", "true")
	checkEffects("replay")

	// The first deliveries again, as they were sent (a retry of the same
	// bytes within the timestamp tolerance).
	mu.Lock()
	first := requests[:len(ids)]
	mu.Unlock()
	for _, req := range first {
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/hooks/again", bytes.NewReader(req.body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header = req.header.Clone()
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	http.DefaultClient.CloseIdleConnections()
	checkAnswers("resent", "true")
	checkEffects("resent")
}
