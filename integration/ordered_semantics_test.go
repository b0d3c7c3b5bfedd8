package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// orderSink records, in publish order, the payloads it acknowledges; fail
// decides per message whether to refuse it (nil: acknowledge everything).
// With keyBatches it is a publishers.KeyBatcher and keeps that promise: once a
// key's message failed other than permanently, the key's later messages in
// the call are not sent.
type orderSink struct {
	mu         sync.Mutex
	got        []string
	calls      [][]string
	fail       func(m outbox.Message) error
	keyBatches bool
}

// KeyBatches implements publishers.KeyBatcher.
func (s *orderSink) KeyBatches() bool { return s.keyBatches }

func (s *orderSink) Publish(_ context.Context, msgs []outbox.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make([]error, len(msgs))
	var call []string
	failed := false
	stopped := map[string]bool{}
	for i, m := range msgs {
		call = append(call, string(m.Payload))
		key := m.Topic + "/" + string(m.Key)
		switch {
		case s.keyBatches && m.Key != nil && stopped[key]:
			errs[i] = errors.New("not sent: an earlier message of its key failed")
		case s.fail != nil:
			errs[i] = s.fail(m)
		}
		if errs[i] != nil && !publishers.IsPermanent(errs[i]) {
			stopped[key] = true
		}
		if errs[i] == nil {
			s.got = append(s.got, string(m.Payload))
		} else {
			failed = true
		}
	}
	s.calls = append(s.calls, call)
	if failed {
		return publishers.Errors(errs)
	}
	return nil
}

func (s *orderSink) Close() error { return nil }

func (s *orderSink) delivered() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

// indexOf returns the position of payload in the delivered order, or -1.
func indexOf(got []string, payload string) int {
	for i, p := range got {
		if p == payload {
			return i
		}
	}
	return -1
}

// An earlier write for a key, still uncommitted, must not be overtaken by a
// later write that committed first: the relay waits until the earlier
// transaction ends, then publishes both in write order.
func TestOrderedVisibilityHazard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A witness written before the open transaction: ready at once.
	b.write(outbox.Message{Topic: "orders", Key: []byte("W"), Payload: []byte("W:0")})
	tx1, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(b.ctx) //nolint:errcheck
	if _, err := b.writer.Write(b.ctx, tx1, outbox.Message{Topic: "orders", Key: []byte("K"), Payload: []byte("K:0")}); err != nil {
		t.Fatal(err)
	}
	later := b.write(outbox.Message{Topic: "orders", Key: []byte("K"), Payload: []byte("K:1")})[0]

	s := &orderSink{}
	b.startRelay(s, orderedConfig(1)) // one shard: W and K are claimed together
	// Once the witness is out, the relay has claimed from the shard while
	// K:1 was committed and due ...
	await(t, 10*time.Second, func() bool { return indexOf(s.delivered(), "W:0") >= 0 }, "the witness was not delivered")
	// ... and left K:1 alone, because an earlier write for K is uncommitted.
	if r := b.row(later); r.Status != "pending" || r.Attempt != 0 || indexOf(s.delivered(), "K:1") >= 0 {
		t.Fatalf("K:1 was claimed while an earlier write for K was uncommitted: status %s, attempt %d, delivered %v", r.Status, r.Attempt, s.delivered())
	}
	if err := tx1.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	await(t, 10*time.Second, func() bool { return len(s.delivered()) == 3 }, "not delivered after commit: %v", s.delivered())
	if got := s.delivered(); indexOf(got, "K:0") > indexOf(got, "K:1") {
		t.Errorf("delivered %v, want K:0 before K:1", got)
	}
}

// With HeadOfLineWait, a key whose first event keeps failing transiently
// holds its later events back until the first one gets through; other keys
// flow meanwhile.
func TestOrderedHeadOfLineWait(t *testing.T) {
	t.Parallel()
	forKeyBatches(t, testOrderedHeadOfLineWait)
}

// forKeyBatches runs test against a sink that takes one event per key per
// call and against one that takes a key's run in one call
// (publishers.KeyBatcher): the ordered semantics are the same.
func forKeyBatches(t *testing.T, test func(t *testing.T, keyBatches bool)) {
	for _, kb := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyBatches=%v", kb), func(t *testing.T) {
			t.Parallel()
			test(t, kb)
		})
	}
}

func testOrderedHeadOfLineWait(t *testing.T, keyBatches bool) {
	b := setup(t)
	var mu sync.Mutex
	failures := 3
	s := &orderSink{keyBatches: keyBatches, fail: func(m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if string(m.Payload) == "stuck:0" && failures > 0 {
			failures--
			return errors.New("broker said no")
		}
		return nil
	}}
	b.write(
		outbox.Message{Topic: "orders", Key: []byte("stuck"), Payload: []byte("stuck:0")},
		outbox.Message{Topic: "orders", Key: []byte("stuck"), Payload: []byte("stuck:1")},
		outbox.Message{Topic: "orders", Key: []byte("stuck"), Payload: []byte("stuck:2")},
		outbox.Message{Topic: "orders", Key: []byte("free"), Payload: []byte("free:0")},
		outbox.Message{Topic: "orders", Key: []byte("free"), Payload: []byte("free:1")},
	)
	cfg := orderedConfig(1) // one shard: both keys share it
	cfg.BackoffMin, cfg.BackoffMax = 50*time.Millisecond, 100*time.Millisecond
	b.startRelay(s, cfg)
	await(t, 10*time.Second, func() bool { return b.count("status = 'sent'") == 5 }, "not all sent: %v", b.statuses())
	got := s.delivered()
	if indexOf(got, "stuck:0") > indexOf(got, "stuck:1") || indexOf(got, "stuck:1") > indexOf(got, "stuck:2") {
		t.Errorf("stuck key delivered out of order: %v", got)
	}
	if indexOf(got, "free:1") > indexOf(got, "stuck:0") {
		t.Errorf("the free key waited for the stuck one: %v", got)
	}
	if n := b.count("attempt = 4 AND status = 'sent' AND payload = 'stuck:0'"); n != 1 {
		t.Errorf("stuck:0 should be sent at its 4th attempt: %v", b.rows("true"))
	}
	// The events behind it were released untouched each time: no attempt
	// spent on them.
	if n := b.count("attempt = 1 AND status = 'sent' AND payload IN ('stuck:1', 'stuck:2')"); n != 2 {
		t.Errorf("stuck:1 and stuck:2 should be sent at their first attempt: %v", b.rows("true"))
	}
}

// For a sink that takes a key's run in one call (publishers.KeyBatcher), the
// ordered loop publishes each key's claimed events together, in write
// order, instead of one event per key per call.
func TestOrderedKeyBatchesPublishAKeysRunInOneCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var msgs []outbox.Message
	for i := range 30 {
		key := []string{"a", "b", "c"}[i%3]
		msgs = append(msgs, outbox.Message{Topic: "orders", Key: []byte(key), Payload: fmt.Appendf(nil, "%s:%d", key, i/3)})
	}
	b.write(msgs...)
	s := &orderSink{keyBatches: true}
	b.startRelay(s, orderedConfig(1))
	await(t, 10*time.Second, func() bool { return b.count("status = 'sent'") == 30 }, "not all sent: %v", b.statuses())
	got := s.delivered()
	for _, key := range []string{"a", "b", "c"} {
		for i := 1; i < 10; i++ {
			if indexOf(got, fmt.Sprintf("%s:%d", key, i-1)) > indexOf(got, fmt.Sprintf("%s:%d", key, i)) {
				t.Errorf("key %s delivered out of order: %v", key, got)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	most := 0
	for _, call := range s.calls {
		perKey := map[string]int{}
		for _, p := range call {
			key, _, _ := strings.Cut(p, ":")
			perKey[key]++
			most = max(most, perKey[key])
		}
	}
	if most < 2 {
		t.Errorf("no call carried two events of one key (calls %v): the key batches were not used", s.calls)
	}
}

// With HeadOfLinePark, a key's event that fails transiently is parked
// (failed, "parked: ...") at once and the key's later events go on.
func TestOrderedHeadOfLinePark(t *testing.T) {
	t.Parallel()
	forKeyBatches(t, testOrderedHeadOfLinePark)
}

func testOrderedHeadOfLinePark(t *testing.T, keyBatches bool) {
	b := setup(t)
	s := &orderSink{keyBatches: keyBatches, fail: func(m outbox.Message) error {
		if string(m.Payload) == "poison:0" {
			return errors.New("consumer contract violated")
		}
		return nil
	}}
	ids := b.write(
		outbox.Message{Topic: "orders", Key: []byte("poison"), Payload: []byte("poison:0")},
		outbox.Message{Topic: "orders", Key: []byte("poison"), Payload: []byte("poison:1")},
		outbox.Message{Topic: "orders", Key: []byte("other"), Payload: []byte("other:0")},
	)
	cfg := orderedConfig(1)
	cfg.Ordering.HeadOfLine = relay.HeadOfLinePark
	b.startRelay(s, cfg)
	await(t, 10*time.Second, func() bool { return b.count("status = 'sent'") == 2 && b.count("status = 'failed'") == 1 },
		"later events did not go on: %v", b.statuses())
	r := b.row(ids[0])
	if r.Status != "failed" || r.Attempt != 1 || r.LastError == nil || !strings.HasPrefix(*r.LastError, "parked: ") {
		t.Errorf("poison:0: status %s, attempt %d, last_error %v; want failed at attempt 1, parked", r.Status, r.Attempt, deref(r.LastError))
	}
	if got := s.delivered(); indexOf(got, "poison:1") < 0 {
		t.Errorf("poison:1 not delivered: %v", got)
	}
}

// The shard table holds one readable row per shard, every shard is handed
// back when its relay stops, and a relay configured for another shard
// count refuses to start.
func TestOrderedShardTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("k:0")})
	s := &orderSink{}
	running := b.startRelay(s, orderedConfig(5))
	await(t, 10*time.Second, func() bool { return len(s.delivered()) == 1 }, "not delivered")
	if err := running.stop(t); err != nil {
		t.Fatal(err)
	}
	var shards, held int
	err := b.pool.QueryRow(b.ctx, "SELECT count(*), count(*) FILTER (WHERE locked_by IS NOT NULL) FROM "+b.table.Related("shard_ranges")).Scan(&shards, &held)
	if err != nil || shards != 5 || held != 0 {
		t.Fatalf("shard table: %d rows, %d held (%v); want 5 rows, none held after stop", shards, held, err)
	}
	err = b.newRelay(&orderSink{}, orderedConfig(7)).Run(b.ctx)
	if err == nil || !strings.Contains(err.Error(), "5 shards") || !strings.Contains(err.Error(), "configured for 7") {
		t.Errorf("Run with another shard count = %v, want an error naming both counts", err)
	}
}

// A claim whose relay died holds its key back while its lease runs, and
// is claimed again before the key's later events once the lease lapses:
// processing rows stay in the ordered claim's view (they are read through
// processing_idx since migration 005, not through ordered_pending_idx).
func TestOrderedOrphanedClaimKeepsItsPlace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.write(outbox.Message{Topic: "orders", Key: []byte("K"), Payload: []byte("K:0")})[0]
	b.write(outbox.Message{Topic: "orders", Key: []byte("K"), Payload: []byte("K:1")})
	b.write(outbox.Message{Topic: "orders", Key: []byte("K"), Payload: []byte("K:2")})
	// K:0 as a relay that died mid-publish left it: claimed, lease running.
	b.exec(`UPDATE {{table}} SET status = 'processing', locked_by = 'dead#1', attempt = 1,
	            locked_until = now() + interval '1 second' WHERE id = $1`, first)

	s := &orderSink{}
	b.startRelay(s, orderedConfig(1))
	await(t, 10*time.Second, func() bool { return b.count("status = 'sent'") == 3 }, "not all sent: %v", b.statuses())
	if got := s.delivered(); strings.Join(got, ",") != "K:0,K:1,K:2" {
		t.Errorf("delivered %v, want K:0,K:1,K:2: a later event overtook the orphaned claim", got)
	}
	if r := b.row(first); r.Attempt != 2 {
		t.Errorf("K:0 attempt %d, want 2 (claimed again after its lease lapsed)", r.Attempt)
	}
}

// A shard whose only unfinished row is a lapsed claim has work: a relay
// leases it and publishes the row.
func TestOrderedLapsedClaimAloneIsServed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.write(outbox.Message{Topic: "orders", Key: []byte("K"), Payload: []byte("K:0")})[0]
	b.exec(`UPDATE {{table}} SET status = 'processing', locked_by = 'dead#1', attempt = 1,
	            locked_until = now() - interval '1 second' WHERE id = $1`, id)

	s := &orderSink{}
	b.startRelay(s, orderedConfig(4))
	await(t, 10*time.Second, func() bool { return b.row(id).Status == "sent" }, "the lapsed claim was not served: %v", b.rows("true"))
	if got := s.delivered(); len(got) != 1 || got[0] != "K:0" {
		t.Errorf("delivered %v, want [K:0]", got)
	}
}
