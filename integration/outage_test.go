package integration

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/relay"
)

// Every produce is refused with NOT_ENOUGH_REPLICAS (the in-sync replicas
// fell below min.insync.replicas): a retriable error, but no write can
// succeed anywhere. The backlog must not burn its attempts: batches that
// get nothing through, and the one-row probes that follow, are deferred
// with the attempt given back. When the cluster heals, everything arrives.
func TestKafkaClusterWideRetriableErrorBurnsNoBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := startBroker(t, kfakebroker.Options{Topics: []string{"orders"}})
	var broken atomic.Bool
	var refused atomic.Int64
	broken.Store(true)
	br.Cluster().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		br.Cluster().KeepControl()
		if !broken.Load() {
			return nil, nil, false
		}
		refused.Add(1)
		return kfakebroker.ProduceErrorResponse(req.(*kmsg.ProduceRequest), kerr.NotEnoughReplicas.Code), nil, true
	})
	pub := newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs(), MaxAttempts: 1})
	written := b.writeN(50, "orders", "isr")
	b.startRelay(pub, relay.Config{
		MaxAttempts: 3, BackoffMin: 2 * time.Second, BackoffMax: 4 * time.Second,
		OutageBackoffMin: 10 * time.Millisecond, OutageBackoffMax: 40 * time.Millisecond,
	})
	await(t, 10*time.Second, func() bool { return refused.Load() >= 20 }, "broker refused only %d produces", refused.Load())
	await(t, 10*time.Second, func() bool {
		return b.count("status = 'pending' AND attempt = 0 AND last_error LIKE '%Not Enough Replicas%'") == len(written)
	}, "rows were not all deferred with their attempt given back: %v", b.statuses())
	if n := b.count("status = 'failed' OR attempt > 1 OR (status = 'pending' AND attempt > 0)"); n != 0 {
		t.Fatalf("%d rows failed or charged while the cluster refused every write: %v", n, b.statuses())
	}
	broken.Store(false)
	await(t, 20*time.Second, func() bool { return b.count("status = 'sent'") == len(written) }, "not delivered after the cluster healed: %v", b.statuses())
	if n := b.count("status = 'failed'"); n != 0 {
		t.Errorf("%d rows failed", n)
	}
}

// One topic's messages are unavailable (its partition leader is out of
// reach) while the rest of the sink works: the other topics keep flowing at
// full speed, and the stuck row keeps its attempts.
func TestOneUnavailableTopicDoesNotStallTheOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := &sink{fn: func(_ context.Context, msgs []outbox.Message) error {
		errs := make(publishers.Errors, len(msgs))
		for i, m := range msgs {
			if m.Topic == "down" {
				errs[i] = publishers.Unavailable(errors.New("leader of down/0 unreachable"))
			}
		}
		return errs
	}}
	stuck := b.write(outbox.Message{Topic: "down", Payload: []byte("stuck")})[0]
	b.writeN(1000, "up", "flowing")
	b.startRelay(s, relay.Config{BatchSize: 100, BackoffMin: 50 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	await(t, 15*time.Second, func() bool { return b.count("status = 'sent'") == 1000 }, "healthy topic stalled: %v", b.statuses())
	row := b.row(stuck)
	if row.Status == "failed" || row.Attempt > 1 || row.LastError == nil || !strings.Contains(*row.LastError, "unreachable") {
		t.Errorf("stuck row: status %s, attempt %d, last_error %v; want pending or processing, attempt <= 1, the reason", row.Status, row.Attempt, deref(row.LastError))
	}
}

// A row whose created_at is 'infinity' (inserted by hand) cannot be read
// into a Go time: it must fail alone, not break the claim of its batch.
func TestNonFiniteCreatedAtFailsOnlyItsRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := b.writeN(5, "orders", "good")
	b.exec(`INSERT INTO {{table}} (id, topic, payload, created_at) VALUES (gen_random_uuid(), 'orders', 'x', 'infinity')`)
	s := &sink{}
	res, err := b.newRelay(s, relay.Config{}).ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Fatalf("ProcessBatch: %v", err)
	}
	if want := (relay.BatchResult{Claimed: 6, Sent: 5, Failed: 1}); res != want {
		t.Errorf("ProcessBatch = %+v, want %+v", res, want)
	}
	if n := b.count("status = 'failed' AND last_error LIKE '%created_at%'"); n != 1 {
		t.Errorf("%d rows failed naming created_at, want 1: %v", n, b.rows("true"))
	}
	for _, id := range good {
		if b.row(id).Status != "sent" {
			t.Errorf("row %s not sent", id)
		}
	}
}

// Two replicas configured with the same ID (one Deployment, one
// OUTBOX_RELAY_ID): the fence must still hold, because every claim writes
// its own token to locked_by. Here the rows are taken over mid-publish by
// "another claim of the same replica id".
func TestSharedReplicaIDIsStillFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(3, "orders", "shared")
	s := &sink{fn: func(ctx context.Context, msgs []outbox.Message) error {
		b.exec("UPDATE {{table}} SET locked_by = 'same#999999', locked_until = now() + interval '1 minute' WHERE status = 'processing'")
		return errors.New("transient")
	}}
	res, err := b.newRelay(s, relay.Config{ID: "same"}).ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 3 || res.Fenced != 3 || res.Sent+res.Retried+res.Failed+res.Released != 0 {
		t.Errorf("ProcessBatch = %+v, want 3 claimed, 3 fenced, nothing recorded", res)
	}
	for _, id := range ids {
		if r := b.row(id); r.Status != "processing" || deref(r.LockedBy) != "same#999999" || r.Attempt != 1 || r.LastError != nil {
			t.Errorf("row %s: status %s, locked_by %s, attempt %d, last_error %v; want it untouched", id, r.Status, deref(r.LockedBy), r.Attempt, deref(r.LastError))
		}
	}
}

// Two relays given the same ID, each making its first claim, write
// different locked_by tokens: claim numbers start at a random point.
func TestSharedReplicaIDClaimsWriteDistinctTokens(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(2, "orders", "tokens")
	for i := 0; i < 2; i++ {
		res, err := b.newRelay(&sink{}, relay.Config{ID: "same"}).ProcessBatch(b.ctx, 1)
		if err != nil || res.Sent != 1 {
			t.Fatalf("relay %d: %+v, %v", i, res, err)
		}
	}
	first, second := b.row(ids[0]).LockedBy, b.row(ids[1]).LockedBy
	if replicaOf(first) != "same" || replicaOf(second) != "same" || *first == *second {
		t.Errorf("locked_by tokens %v and %v: want same#<n> with different n", deref(first), deref(second))
	}
}
