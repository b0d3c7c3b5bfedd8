package integration

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// RunRetention deletes the sent rows whose sent_at is older than
// Retention, in batches of at most JanitorBatch, and keeps younger sent
// rows and failed and pending rows however old their sent_at; the job is
// then not due again on any replica until JanitorInterval has passed.
func TestStoresRetentionDeletesOnlyExpiredSentRows(t *testing.T) {
	t.Parallel()
	forEachStoreUnpartitioned(t, "", func(t *testing.T, s storeBackend) {
		ctx := context.Background()
		sent := resultIDs(s.write(t, storeMessages(10, "orders", "kept-or-not")...))
		poison := s.write(t, outbox.Message{Topic: "orders", Payload: []byte("poison")})[0].ID
		delayed := s.write(t, outbox.Message{Topic: "orders", Payload: []byte("later"), DeliverAt: time.Now().Add(time.Hour)})[0].ID

		// The rows reach sent and failed through a relay, as in production.
		sk := &sink{fn: func(_ context.Context, msgs []outbox.Message) error {
			errs := make(publishers.Errors, len(msgs))
			for i, m := range msgs {
				if m.ID == poison {
					errs[i] = publishers.Permanent(errors.New("rejected"))
				}
			}
			return errs
		}}
		res, err := s.newRelay(t, sk, relay.Config{}).ProcessBatch(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := (relay.BatchResult{Claimed: 11, Sent: 10, Failed: 1}); res != want {
			t.Fatalf("ProcessBatch = %+v, want %+v", res, want)
		}

		expired, young := sent[:6], sent[6:]
		s.backdateSent(t, expired, 2*time.Hour)
		s.backdateSent(t, young, 30*time.Minute)
		// sent_at on rows that are not sent, to show that status decides.
		s.backdateSent(t, []uuid.UUID{poison, delayed}, 30*24*time.Hour)

		r := s.newRelay(t, &sink{}, relay.Config{Retention: time.Hour, JanitorBatch: 4})
		ret, err := r.RunRetention(ctx)
		if err != nil {
			t.Fatalf("RunRetention: %v", err)
		}
		if !ret.Ran || ret.Deleted != 6 || ret.Batches != 2 || !ret.Complete || ret.LeaseLost {
			t.Errorf("RunRetention = %+v, want ran, 6 deleted in 2 batches of at most 4, complete", ret)
		}
		rows := s.rows(t)
		for _, id := range expired {
			if r, ok := rows[id]; ok {
				t.Errorf("expired sent row %s is still there: %v", id, r)
			}
		}
		kept := append(slices.Clone(young), poison, delayed)
		for _, id := range kept {
			if _, ok := rows[id]; !ok {
				t.Errorf("row %s was deleted; only sent rows past the retention may be", id)
			}
		}
		if len(rows) != len(kept) {
			t.Errorf("table holds %d rows, want the %d kept", len(rows), len(kept))
		}
		if st := s.statuses(t); st["sent"] != 4 || st["failed"] != 1 || st["pending"] != 1 {
			t.Errorf("statuses after retention %v, want 4 sent, 1 failed, 1 pending", st)
		}

		// Not due again for JanitorInterval (1m), on any replica.
		s.backdateSent(t, young, 2*time.Hour)
		other := s.newRelay(t, &sink{}, relay.Config{Retention: time.Hour})
		if again, err := other.RunRetention(ctx); err != nil || again.Ran || again.Deleted != 0 {
			t.Errorf("RunRetention before the job is due = %+v, %v; want nothing run", again, err)
		}
		if n := countStatus(t, s, "sent"); n != 4 {
			t.Errorf("%d sent rows after a run that was not due, want 4", n)
		}
	})
}

// Run runs the retention job every JanitorInterval: sent rows that expire
// while the relay runs are deleted without anyone calling RunRetention.
func TestStoresRunRunsRetention(t *testing.T) {
	t.Parallel()
	forEachStoreUnpartitioned(t, "", func(t *testing.T, s storeBackend) {
		ids := resultIDs(s.write(t, storeMessages(25, "orders", "expiring")...))
		startStoreRelay(t, s, &sink{}, relay.Config{Retention: time.Hour, JanitorInterval: 20 * time.Millisecond, JanitorBatch: 10})
		await(t, 10*time.Second, func() bool { return countStatus(t, s, "sent") == len(ids) }, "rows not sent: %v", s.statuses(t))
		s.backdateSent(t, ids[:15], 2*time.Hour)
		await(t, 10*time.Second, func() bool { return len(s.rows(t)) == 10 }, "expired rows not deleted by Run: %d rows left", len(s.rows(t)))
		rows := s.rows(t)
		for _, id := range ids[15:] {
			if r, ok := rows[id]; !ok || r.Status != "sent" {
				t.Errorf("young sent row %s: %v (present %v), want kept", id, r, ok)
			}
		}
	})
}

// A table of another name (qualified with its database on MariaDB) goes
// through the whole lifecycle: written with dedup keys, delivered by Run,
// retried, failed, and its expired sent rows deleted by the retention job
// of its own jobs table.
func TestStoresNamedTableLifecycle(t *testing.T) {
	t.Parallel()
	forEachStoreUnpartitioned(t, "shop_events", func(t *testing.T, s storeBackend) {
		ctx := context.Background()
		res := s.write(t,
			outbox.Message{Topic: "orders", Payload: []byte("a"), DedupKey: "a"},
			outbox.Message{Topic: "orders", Payload: []byte("a again"), DedupKey: "a"},
			outbox.Message{Topic: "orders", Payload: []byte("flaky")},
			outbox.Message{Topic: "orders", Payload: []byte("poison")},
		)
		if !res[1].Duplicate || res[1].ID != res[0].ID {
			t.Fatalf("repeated dedup key = %+v, want a duplicate of %s", res[1], res[0].ID)
		}
		flaky, poison := res[2].ID, res[3].ID
		var flakyFailures atomic.Int32
		flakyFailures.Store(1)
		sk := &sink{fn: func(_ context.Context, msgs []outbox.Message) error {
			errs := make(publishers.Errors, len(msgs))
			for i, m := range msgs {
				switch {
				case m.ID == poison:
					errs[i] = publishers.Permanent(errors.New("rejected"))
				case m.ID == flaky && flakyFailures.Add(-1) >= 0:
					errs[i] = errors.New("try again")
				}
			}
			return errs
		}}
		rr := startStoreRelay(t, s, sk, relay.Config{BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, KeepSent: true})
		await(t, 10*time.Second, func() bool {
			st := s.statuses(t)
			return st["sent"] == 2 && st["failed"] == 1
		}, "rows not settled: %v", s.statuses(t))
		rows := s.rows(t)
		if r := rows[flaky]; r.Attempt != 2 || !r.Sent {
			t.Errorf("flaky row: %v, want sent on attempt 2", r)
		}
		if r := rows[poison]; r.Status != "failed" || r.LastError == nil || !strings.Contains(*r.LastError, "rejected") {
			t.Errorf("poison row: %v, want failed with the reason", r)
		}
		if err := rr.stop(t); err != nil {
			t.Fatal(err)
		}

		s.backdateSent(t, []uuid.UUID{res[0].ID, flaky}, 2*time.Hour)
		ret, err := s.newRelay(t, &sink{}, relay.Config{Retention: time.Hour}).RunRetention(ctx)
		if err != nil {
			t.Fatalf("RunRetention: %v", err)
		}
		if !ret.Ran || ret.Deleted != 2 || !ret.Complete {
			t.Errorf("RunRetention = %+v, want the 2 expired sent rows deleted", ret)
		}
		if rows := s.rows(t); len(rows) != 1 || rows[poison].Status != "failed" {
			t.Errorf("rows after retention: %v, want only the failed one", rows)
		}
	})
}
