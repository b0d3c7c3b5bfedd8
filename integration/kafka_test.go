package integration

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/relay"
)

// A committed event reaches Kafka with its key, payload and headers intact,
// plus the outbox-event-id header; its row is sent with sent_at set.
func TestKafkaCommitIsDelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := startBroker(t, kfakebroker.Options{Topics: []string{"orders.created"}})
	pub := newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs()})

	payload := []byte(`{"order":7,"total":"42.00","note":"ünïcode \u2713"}`)
	headers := map[string]string{"content-type": "application/json", "traceparent": "00-abc-def-01", "empty": ""}
	id := b.write(outbox.Message{Topic: "orders.created", Key: []byte("order-7"), Payload: payload, Headers: headers})[0]
	nokey := b.write(outbox.Message{Topic: "orders.created", Payload: []byte("no key")})[0]

	b.startRelay(pub, relay.Config{})
	await(t, 15*time.Second, func() bool { return b.count("status = 'sent'") == 2 }, "events not sent: %v", b.statuses())

	recs := byEventID(readTopic(t, br.Addrs(), "orders.created"))
	if len(recs) != 2 {
		t.Fatalf("topic holds events %v, want 2", recs)
	}
	got := recs[id.String()]
	if len(got) != 1 {
		t.Fatalf("event %s delivered %d times, want 1", id, len(got))
	}
	r := got[0]
	if string(r.Key) != "order-7" || !bytes.Equal(r.Value, payload) {
		t.Errorf("record key %q, value %q; want %q, %q", r.Key, r.Value, "order-7", payload)
	}
	for name, want := range headers {
		if v, ok := r.Header(name); !ok || v != want {
			t.Errorf("header %q = %q (present once: %v), want %q", name, v, ok, want)
		}
	}
	if v, ok := r.Header(outbox.HeaderEventID); !ok || v != id.String() {
		t.Errorf("%s header = %q (once: %v), want %s", outbox.HeaderEventID, v, ok, id)
	}
	if len(r.Headers) != len(headers)+1 {
		t.Errorf("record has %d headers, want %d: %v", len(r.Headers), len(headers)+1, r.Headers)
	}
	if k := recs[nokey.String()]; len(k) != 1 || k[0].Key != nil || string(k[0].Value) != "no key" {
		t.Errorf("keyless event delivered as %+v, want one record with a null key", k)
	}
	row := b.row(id)
	if row.Status != "sent" || row.SentAt == nil || row.SentAt.Before(row.CreatedAt) || row.Attempt != 1 || row.LockedUntil != nil {
		t.Errorf("row after delivery: status %s, sent_at %v (created %v), attempt %d, locked_until %v",
			row.Status, row.SentAt, row.CreatedAt, row.Attempt, row.LockedUntil)
	}
}

// An event written in a rolled-back transaction leaves no row and is never
// delivered, while a committed one written after it is.
func TestKafkaRollbackIsNeverDelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := startBroker(t, kfakebroker.Options{Topics: []string{"orders"}})
	pub := newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs()})
	b.startRelay(pub, relay.Config{})

	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	ghost, err := b.writer.Write(b.ctx, tx, outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("rolled back")})
	if err != nil {
		t.Fatal(err)
	}
	// Give the relay several polls while the row is uncommitted.
	time.Sleep(100 * time.Millisecond)
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.count("id = $1", ghost.ID); n != 0 {
		t.Fatalf("rolled-back event left %d rows", n)
	}

	marker := b.write(outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("committed")})[0]
	await(t, 15*time.Second, func() bool { return b.count("status = 'sent'") == 1 }, "committed event not sent: %v", b.statuses())
	recs := readTopic(t, br.Addrs(), "orders")
	if len(recs) != 1 || recs[0].EventID() != marker.String() || string(recs[0].Value) != "committed" {
		t.Errorf("topic holds %d records (%v), want only the committed event %s", len(recs), recs, marker)
	}
	if n := b.count("true"); n != 1 {
		t.Errorf("table holds %d rows, want 1", n)
	}
}

// Three relays drain 10,000 events written concurrently in batches: every
// event reaches Kafka exactly once and every row ends sent.
func TestKafkaThreeRelaysDeliverEachEventOnce(t *testing.T) {
	t.Parallel()
	const (
		total     = 10000
		batchSize = 500
		writers   = 4
		topic     = "load"
	)
	b := setup(t)
	br := startBroker(t, kfakebroker.Options{Topics: []string{topic}, Partitions: 4})
	pub := newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs(), BatchSize: batchSize})
	relays := make([]*running, 3)
	for i := range relays {
		relays[i] = b.startRelay(pub, relay.Config{ID: fmt.Sprintf("relay-%d", i), BatchSize: batchSize, PollInterval: 5 * time.Millisecond})
	}

	start := time.Now()
	var wg sync.WaitGroup
	written := make(chan []outbox.Result, total/batchSize)
	for w := range writers {
		wg.Go(func() {
			for batch := w; batch < total/batchSize; batch += writers {
				msgs := make([]outbox.Message, batchSize)
				for i := range msgs {
					n := batch*batchSize + i
					msgs[i] = outbox.Message{Topic: topic, Key: fmt.Appendf(nil, "key-%d", n%97), Payload: fmt.Appendf(nil, "event-%d", n)}
				}
				tx, err := b.pool.Begin(b.ctx)
				if err != nil {
					t.Errorf("begin: %v", err)
					return
				}
				res, err := b.writer.WriteBatch(b.ctx, tx, msgs)
				if err != nil {
					_ = tx.Rollback(b.ctx)
					t.Errorf("WriteBatch: %v", err)
					return
				}
				if err := tx.Commit(b.ctx); err != nil {
					t.Errorf("commit: %v", err)
					return
				}
				written <- res
			}
		})
	}
	wg.Wait()
	close(written)
	if t.Failed() {
		t.FailNow()
	}
	ids := map[string]bool{}
	for res := range written {
		for _, r := range res {
			ids[r.ID.String()] = true
		}
	}
	if len(ids) != total {
		t.Fatalf("wrote %d distinct events, want %d", len(ids), total)
	}

	await(t, 60*time.Second, func() bool { return b.count("status = 'sent'") == total }, "not all events sent: %v", b.statuses())
	t.Logf("%d events written and delivered by 3 relays in %v", total, time.Since(start))
	if n := b.count("status = 'sent' AND sent_at IS NOT NULL AND attempt = 1 AND last_error IS NULL AND locked_until IS NULL"); n != total {
		t.Errorf("%d of %d rows cleanly sent on the first attempt", n, total)
	}

	recs := readTopic(t, br.Addrs(), topic)
	delivered := byEventID(recs)
	dups := 0
	for id, rs := range delivered {
		if !ids[id] {
			t.Errorf("unknown event id %q in the topic", id)
		}
		if len(rs) > 1 {
			dups++
		}
	}
	if len(recs) != total || len(delivered) != total || dups != 0 {
		t.Errorf("topic holds %d records of %d distinct events (%d duplicated), want %d each exactly once", len(recs), len(delivered), dups, total)
	}

	perRelay := map[string]int{}
	rows, err := b.pool.Query(b.ctx, b.sql("SELECT regexp_replace(locked_by, '#[0-9]+$', ''), count(*) FROM {{table}} GROUP BY 1"))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var who string
		var n int
		if err := rows.Scan(&who, &n); err != nil {
			t.Fatal(err)
		}
		perRelay[who] = n
	}
	t.Logf("rows sent per relay: %v", perRelay)
	if len(perRelay) < 2 {
		t.Errorf("only %d relay(s) sent rows (%v); the replicas did not drain side by side", len(perRelay), perRelay)
	}
	for who := range perRelay {
		if !strings.HasPrefix(who, "relay-") {
			t.Errorf("row recorded by unknown relay %q", who)
		}
	}
}

// Permanent Kafka errors fail only their own messages, at once (attempt 1),
// with the reason: a topic the broker does not have (no auto-creation), a
// message over the sink's MaxMessageBytes, and one over the broker's
// message.max.bytes. The other messages of the same batch are delivered.
func TestKafkaPermanentErrorsFailOnlyTheirMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := startBroker(t, kfakebroker.Options{Topics: []string{"orders"}, MaxMessageBytes: 4096})
	pub := newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs(), MaxMessageBytes: 64 << 10})

	good := b.writeN(5, "orders", "good")
	ghost := b.write(outbox.Message{Topic: "no-such-topic", Payload: []byte("lost?")})[0]
	brokerTooBig := b.write(outbox.Message{Topic: "orders", Key: []byte("k1"), Payload: bytes.Repeat([]byte("b"), 8000)})[0]
	sinkTooBig := b.write(outbox.Message{Topic: "orders", Key: []byte("k2"), Payload: bytes.Repeat([]byte("s"), 100<<10)})[0]

	r := b.newRelay(pub, relay.Config{MaxAttempts: 10})
	res, err := r.ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (relay.BatchResult{Claimed: 8, Sent: 5, Failed: 3}); res != want {
		t.Errorf("ProcessBatch = %+v, want %+v", res, want)
	}
	for id, want := range map[uuid.UUID]string{ghost: "no-such-topic", brokerTooBig: "large", sinkTooBig: "MaxMessageBytes"} {
		row := b.row(id)
		if row.Status != "failed" || row.Attempt != 1 || row.LastError == nil || !strings.Contains(*row.LastError, want) {
			t.Errorf("row %s (%s): status %s, attempt %d, last_error %v; want failed at attempt 1 naming %q",
				id, row.Topic, row.Status, row.Attempt, deref(row.LastError), want)
		}
	}
	delivered := byEventID(readTopic(t, br.Addrs(), "orders"))
	for _, id := range good {
		if n := len(delivered[id.String()]); n != 1 {
			t.Errorf("good event %s delivered %d times, want 1", id, n)
		}
		if row := b.row(id); row.Status != "sent" || row.SentAt == nil {
			t.Errorf("good row %s: status %s, sent_at %v", id, row.Status, row.SentAt)
		}
	}
	if len(delivered) != len(good) {
		t.Errorf("topic holds %d events, want only the %d good ones", len(delivered), len(good))
	}
}

// A Kafka outage (the broker closed, then started again on the same port)
// burns no attempts: rows go back to pending with attempt 0 while it lasts,
// and everything is delivered, once, when the broker is back.
func TestKafkaBrokerOutageBurnsNoAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opts := kfakebroker.Options{Port: freePort(t), Topics: []string{"orders"}, DataDir: t.TempDir()}
	br := startBroker(t, opts)
	pub := newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs(), DialTimeout: time.Second, WriteTimeout: 2 * time.Second})
	rr := b.startRelay(pub, relay.Config{MaxAttempts: 2, OutageBackoffMin: 20 * time.Millisecond, OutageBackoffMax: 200 * time.Millisecond})

	before := b.writeN(5, "orders", "before")
	await(t, 15*time.Second, func() bool { return b.count("status = 'sent'") == 5 }, "events not sent before the outage: %v", b.statuses())

	br.Close()
	during := b.writeN(10, "orders", "during")
	// The relay claims, finds the broker gone and releases. With MaxAttempts
	// 2, counted attempts would fail rows within two rounds. Watched for 2s
	// and until the relay has tried the down broker (a minute at most).
	watched, limit := time.Now().Add(2*time.Second), time.Now().Add(time.Minute)
	sawClaim := false
	for (!sawClaim || time.Now().Before(watched)) && time.Now().Before(limit) {
		var burned, maxAttempt, errored, done int
		if err := b.pool.QueryRow(b.ctx, b.sql(`SELECT
    count(*) FILTER (WHERE status = 'pending' AND attempt <> 0),
    coalesce(max(attempt), 0),
    count(*) FILTER (WHERE last_error NOT LIKE '%sink unavailable%'),
    count(*) FILTER (WHERE status IN ('sent', 'failed'))
FROM {{table}}
WHERE id = ANY($1)`), during).Scan(&burned, &maxAttempt, &errored, &done); err != nil {
			t.Fatal(err)
		}
		if burned != 0 || maxAttempt > 1 || errored != 0 || done != 0 {
			t.Fatalf("during the outage: %d pending rows with attempts, max attempt %d, %d with a last_error other than the outage, %d sent/failed; want 0, <=1, 0, 0: %v",
				burned, maxAttempt, errored, done, b.rows("id = ANY($1)", during))
		}
		sawClaim = sawClaim || maxAttempt == 1
		time.Sleep(20 * time.Millisecond)
	}
	if !sawClaim {
		t.Error("the relay never tried the down broker")
	}

	br2 := startBroker(t, opts)
	if got := br2.Addrs()[0]; got != br.Addrs()[0] {
		t.Fatalf("restarted broker at %s, want %s", got, br.Addrs()[0])
	}
	await(t, 30*time.Second, func() bool { return b.count("status = 'sent'") == 15 }, "delivery did not resume: %v", b.statuses())
	if n := b.count("attempt = 1 AND last_error IS NULL AND id = ANY($1)", during); n != 10 {
		t.Errorf("%d of 10 rows delivered on attempt 1; the outage spent attempts: %v", n, b.rows("id = ANY($1)", during))
	}
	delivered := byEventID(readTopic(t, br2.Addrs(), "orders"))
	for _, id := range append(before, during...) {
		if n := len(delivered[id.String()]); n != 1 {
			t.Errorf("event %s delivered %d times, want 1", id, n)
		}
	}
	if err := rr.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// kcat, an independent librdkafka consumer, reads back what the relay
// published: every event with its key, payload and headers.
func TestKafkaKcatReadsRelayOutput(t *testing.T) {
	t.Parallel()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat is not on PATH (%v): this test needs the independent librdkafka consumer; install it with `apt-get install kcat`", err)
	}
	b := setup(t)
	br := startBroker(t, kfakebroker.Options{Topics: []string{"kcat.events"}})
	pub := newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs()})
	const n = 25
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "kcat.events", Key: fmt.Appendf(nil, "key-%02d", i), Payload: fmt.Appendf(nil, "payload-%02d", i),
			Headers: map[string]string{"source": "integration"}}
	}
	written := b.write(msgs...)
	b.startRelay(pub, relay.Config{})
	await(t, 15*time.Second, func() bool { return b.count("status = 'sent'") == n }, "events not sent: %v", b.statuses())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-b", br.Addrs()[0], "-C", "-t", "kcat.events", "-o", "beginning", "-e", "-q",
		"-f", "KEY=%k\tPAYLOAD=%s\tHEADERS=%h\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v; stderr: %s", err, stderr.String())
	}
	type seen struct{ key, payload, headers string }
	byID := map[string][]seen{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 || !strings.HasPrefix(f[0], "KEY=") || !strings.HasPrefix(f[1], "PAYLOAD=") || !strings.HasPrefix(f[2], "HEADERS=") {
			t.Fatalf("unexpected kcat line %q", line)
		}
		s := seen{strings.TrimPrefix(f[0], "KEY="), strings.TrimPrefix(f[1], "PAYLOAD="), strings.TrimPrefix(f[2], "HEADERS=")}
		var id string
		for h := range strings.SplitSeq(s.headers, ",") {
			if v, ok := strings.CutPrefix(h, outbox.HeaderEventID+"="); ok {
				id = v
			}
		}
		byID[id] = append(byID[id], s)
	}
	if len(byID) != n {
		t.Errorf("kcat saw %d distinct events, want %d; output:\n%s", len(byID), n, out)
	}
	for i, id := range written {
		got := byID[id.String()]
		if len(got) != 1 {
			t.Errorf("kcat saw event %s %d times, want 1", id, len(got))
			continue
		}
		if want := fmt.Sprintf("key-%02d", i); got[0].key != want {
			t.Errorf("event %s: kcat key %q, want %q", id, got[0].key, want)
		}
		if want := fmt.Sprintf("payload-%02d", i); got[0].payload != want {
			t.Errorf("event %s: kcat payload %q, want %q", id, got[0].payload, want)
		}
		if !strings.Contains(got[0].headers, "source=integration") {
			t.Errorf("event %s: kcat headers %q lack source=integration", id, got[0].headers)
		}
	}
}
