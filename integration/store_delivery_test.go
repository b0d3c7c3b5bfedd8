package integration

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/relay"
)

// Committed events reach a Kafka-protocol broker over TCP through the real
// Kafka sink, each exactly once, with key, payload and headers intact and
// the outbox-event-id header; every row ends sent on its first attempt.
func TestStoresKafkaEndToEnd(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		const topic = "orders.created"
		br := startBroker(t, kfakebroker.Options{Topics: []string{topic}, Partitions: 3})
		pub := newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs()})

		headers := map[string]string{"content-type": "application/json", "traceparent": "00-abc-def-01", "empty": ""}
		special := []outbox.Message{
			{Topic: topic, Key: []byte("order-7"), Payload: []byte(`{"order":7,"note":"ünïcode ✓"}`), Headers: headers},
			{Topic: topic, Payload: []byte("no key")},
			{Topic: topic, Key: []byte{}, Payload: []byte("empty key")},
			{Topic: topic, Key: []byte{0, 0xff, 'k'}, Payload: []byte{0, 1, 2, 0xfe, 0xff}},
			// Header text JSON must escape, and a payload of a quarter MiB.
			{Topic: topic, Key: []byte("big"), Payload: bytes.Repeat([]byte("0123456789abcdef"), 16<<10),
				Headers: map[string]string{"quote\"back\\slash": "line\nbreak\ttab \"q\" \\ 🚀 \u00e9", "x-Upper-Case": "Value"}},
		}
		want := map[uuid.UUID]outbox.Message{}
		for i, r := range s.write(t, special...) {
			want[r.ID] = special[i]
		}
		bulk := storeMessages(300, topic, "bulk")
		for i := range bulk {
			bulk[i].Headers = map[string]string{"n": fmt.Sprint(i)}
		}
		for i, r := range s.write(t, bulk...) {
			want[r.ID] = bulk[i]
		}

		startStoreRelay(t, s, pub, relay.Config{BatchSize: 100})
		await(t, 30*time.Second, func() bool { return countStatus(t, s, "sent") == len(want) },
			"not every event sent: %v", s.statuses(t))

		recs := readTopic(t, br.Addrs(), topic)
		if len(recs) != len(want) {
			t.Errorf("topic holds %d records, want %d", len(recs), len(want))
		}
		for id, msgs := range byEventID(recs) {
			uid, err := uuid.Parse(id)
			m, ok := want[uid]
			if err != nil || !ok {
				t.Errorf("record with unknown event id %q", id)
				continue
			}
			if len(msgs) != 1 {
				t.Errorf("event %s delivered %d times, want once", id, len(msgs))
				continue
			}
			r := msgs[0]
			// A nil key is Kafka's null key; an empty one stays empty.
			if !bytes.Equal(r.Key, m.Key) || (m.Key == nil) != (r.Key == nil) || !bytes.Equal(r.Value, m.Payload) {
				t.Errorf("event %s: key %q value %q, want key %q value %q", id, r.Key, r.Value, m.Key, m.Payload)
			}
			for name, v := range m.Headers {
				if got, once := r.Header(name); !once || got != v {
					t.Errorf("event %s: header %q = %q (present once: %v), want %q", id, name, got, once, v)
				}
			}
			if len(r.Headers) != len(m.Headers)+1 {
				t.Errorf("event %s: %d headers %v, want %d and the event id", id, len(r.Headers), r.Headers, len(m.Headers))
			}
		}
		if missing := len(want) - len(byEventID(recs)); missing != 0 {
			t.Errorf("%d events never reached the topic", missing)
		}
		for id, row := range s.rows(t) {
			if row.Status != "sent" || !row.Sent || row.Attempt != 1 || row.LastError != nil || row.LeaseLeft != nil {
				t.Errorf("row %s after delivery: %v; want sent on attempt 1, no error, no lease", id, row)
			}
		}
	})
}

// Three relays on one table, while events are being written by four
// concurrent writers: no event is published twice and every row ends sent.
func TestStoresThreeRelaysPublishEachEventOnce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		const (
			writers  = 4
			perWrite = 100
			writes   = 30 // 3,000 events
		)
		sk := &sink{}
		relays := make([]*running, 3)
		for i := range relays {
			relays[i] = startStoreRelay(t, s, sk, relay.Config{ID: fmt.Sprintf("relay-%d", i), BatchSize: 100, PollInterval: 5 * time.Millisecond})
		}

		var mu sync.Mutex
		written := map[uuid.UUID]bool{}
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for n := w; n < writes; n += writers {
					res := s.write(t, storeMessages(perWrite, "load", fmt.Sprintf("w%d", n))...)
					mu.Lock()
					for _, r := range res {
						written[r.ID] = true
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(written) != writes*perWrite {
			t.Fatalf("wrote %d distinct events, want %d", len(written), writes*perWrite)
		}

		await(t, 60*time.Second, func() bool { return countStatus(t, s, "sent") == len(written) },
			"not every event sent: %v", s.statuses(t))
		acked := sk.ackedByID()
		for id, n := range acked {
			if !written[id] {
				t.Errorf("published %s, which was never written", id)
			}
			if n != 1 {
				t.Errorf("event %s published %d times, want once", id, n)
			}
		}
		if len(acked) != len(written) {
			t.Errorf("%d distinct events published, want %d", len(acked), len(written))
		}
		perRelay := map[string]int{}
		for id, row := range s.rows(t) {
			if row.Attempt != 1 || !row.Sent {
				t.Errorf("row %s: %v, want sent on attempt 1", id, row)
			}
			perRelay[replicaOf(row.LockedBy)]++
		}
		t.Logf("rows sent per relay: %v", perRelay)
		for _, rr := range relays {
			if err := rr.stop(t); err != nil {
				t.Errorf("relay %s: Run: %v", rr.ID(), err)
			}
		}
	})
}

// A repeated DedupKey writes one row, in another transaction or in the
// same batch, and the write says it was a duplicate and names the row that
// holds the key; the relay publishes that row once.
func TestStoresDedupKeyWritesOneRow(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		first := s.write(t, outbox.Message{Topic: "orders", Payload: []byte("first"), DedupKey: "order-1"})[0]
		if first.Duplicate {
			t.Fatalf("first write of a key reported as a duplicate: %+v", first)
		}
		again := s.write(t,
			outbox.Message{Topic: "orders", Payload: []byte("second"), DedupKey: "order-1"},
			outbox.Message{Topic: "orders", Payload: []byte("fresh"), DedupKey: "order-2"},
			outbox.Message{Topic: "orders", Payload: []byte("fresh again"), DedupKey: "order-2"},
			outbox.Message{Topic: "orders", Payload: []byte("case differs"), DedupKey: "ORDER-1"},
		)
		if !again[0].Duplicate || again[0].ID != first.ID {
			t.Errorf("second write of order-1 = %+v, want a duplicate of %s", again[0], first.ID)
		}
		if again[1].Duplicate || !again[2].Duplicate || again[2].ID != again[1].ID {
			t.Errorf("order-2 twice in one batch = %+v, %+v; want written, then a duplicate of it", again[1], again[2])
		}
		if again[3].Duplicate {
			t.Errorf("ORDER-1 reported as a duplicate of order-1: keys compare byte for byte")
		}
		rows := s.rows(t)
		if len(rows) != 3 {
			t.Fatalf("table holds %d rows, want 3 (order-1, order-2, ORDER-1): %v", len(rows), rows)
		}

		sk := &sink{}
		res, err := s.newRelay(t, sk, relay.Config{}).ProcessBatch(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := (relay.BatchResult{Claimed: 3, Sent: 3}); res != want {
			t.Errorf("ProcessBatch = %+v, want %+v", res, want)
		}
		payloads := map[string]int{}
		for _, m := range sk.ackedMessages() {
			payloads[string(m.Payload)]++
		}
		if want := map[string]int{"first": 1, "fresh": 1, "case differs": 1}; fmt.Sprint(payloads) != fmt.Sprint(want) {
			t.Errorf("published payloads %v, want %v", payloads, want)
		}
	})
}

// An event of a transaction that commits long after later events were
// delivered (its row lies below the claims' floor by then) is still
// delivered, promptly and once; an event of a transaction that rolls back
// never is.
func TestStoresLateCommitIsDeliveredAndRollbackNever(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		late, commitLate := s.writeOpen(t, outbox.Message{Topic: "orders", Payload: []byte("late")})
		ghost, rollBack := s.writeOpen(t, outbox.Message{Topic: "orders", Payload: []byte("rolled back")})
		opened := time.Now()
		sk := &sink{}
		startStoreRelay(t, s, sk, relay.Config{})

		// Events keep flowing past the open transactions for longer than
		// the claims' floor margin (a second).
		n := 0
		for time.Since(opened) < 2*time.Second {
			s.write(t, outbox.Message{Topic: "orders", Payload: fmt.Appendf(nil, "flow-%d", n)})
			n++
			await(t, 10*time.Second, func() bool { return countStatus(t, s, "sent") == n }, "flowing event %d not sent: %v", n, s.statuses(t))
		}
		commitLate(true)
		rollBack(false)
		committed := time.Now()
		// Below the floor, the row waits for a look, spaced by 200 times the
		// last look's duration and at most a minute apart (claim_floor.go):
		// usually well under a second, but a look slowed to 50ms by a busy
		// host puts the next one 10s out.
		await(t, 75*time.Second, func() bool { return countStatus(t, s, "sent") == n+1 }, "late-committed event not sent: %v", s.statuses(t))
		t.Logf("%s: late-committed event sent within %v of its commit, after %d events passed it", t.Name(), time.Since(committed), n)

		acked := sk.ackedByID()
		if acked[late[0].ID] != 1 {
			t.Errorf("late-committed event published %d times, want 1", acked[late[0].ID])
		}
		if acked[ghost[0].ID] != 0 {
			t.Errorf("rolled-back event published %d times", acked[ghost[0].ID])
		}
		if _, ok := s.rows(t)[ghost[0].ID]; ok {
			t.Errorf("rolled-back event left a row")
		}
		for id, c := range acked {
			if c != 1 {
				t.Errorf("event %s published %d times, want once", id, c)
			}
		}
		if len(acked) != n+1 {
			t.Errorf("%d events published, want %d", len(acked), n+1)
		}
	})
}

// While the Kafka broker is gone the relay defers rows without spending
// attempts and claims nothing; once the broker is back on its address, the
// backlog reaches Kafka, each event once, on its first counted attempt.
func TestStoresKafkaBrokerOutage(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		opts := kfakebroker.Options{Port: freePort(t), Topics: []string{"orders"}, DataDir: t.TempDir()}
		br := startBroker(t, opts)
		pub := newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs()})
		logs := &logLines{}
		startStoreRelay(t, s, pub, relay.Config{Logger: slog.New(slog.NewJSONHandler(logs, nil)), ProbeInterval: 50 * time.Millisecond})

		before := resultIDs(s.write(t, storeMessages(5, "orders", "before")...))
		await(t, 15*time.Second, func() bool { return countStatus(t, s, "sent") == 5 }, "events not sent before the outage: %v", s.statuses(t))

		br.Close()
		during := resultIDs(s.write(t, storeMessages(50, "orders", "during")...))
		await(t, 15*time.Second, func() bool { return logs.count("sink unavailable; pausing claims until it answers") > 0 },
			"the outage was not noticed: %s", logs)
		for id, r := range s.rows(t) {
			if r.Status == "failed" || (r.Status == "pending" && r.Attempt != 0) {
				t.Errorf("row %s during the outage: %v; want no attempt spent", id, r)
			}
		}

		startBroker(t, opts)
		await(t, 30*time.Second, func() bool { return countStatus(t, s, "sent") == len(before)+len(during) },
			"the backlog did not drain after the outage: %v", s.statuses(t))
		recs := byEventID(readTopic(t, br.Addrs(), "orders"))
		rows := s.rows(t)
		for _, id := range append(before, during...) {
			if n := len(recs[id.String()]); n != 1 {
				t.Errorf("event %s in the topic %d times, want once", id, n)
			}
			if r := rows[id]; r.Attempt != 1 || r.LastError != nil || !r.Sent {
				t.Errorf("row %s after the outage: %v; want sent on attempt 1 with no error", id, r)
			}
		}
		if len(recs) != len(before)+len(during) {
			t.Errorf("topic holds %d events, want %d", len(recs), len(before)+len(during))
		}
	})
}
