package integration

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// Rows written by plain SQL with payloads past the writer's limit, among
// rows the writer wrote, fail with their size as the reason while the
// others are sent; the sink never gets their payloads (the claim leaves
// them in the database: relay's TestClaimsBoundWhatTheyRead and
// TestMySQLClaimBoundsWhatItReads).
func TestStoresTooLargeRowsFailUnread(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		const limit = outbox.DefaultMaxPayloadBytes
		small := resultIDs(s.write(t, storeMessages(3, "orders", "before")...))
		var large []uuid.UUID
		for range 3 {
			large = append(large, s.insertPayload(t, "orders", bytes.Repeat([]byte("L"), 2*limit)))
		}
		small = append(small, resultIDs(s.write(t, storeMessages(3, "orders", "after")...))...)
		sk := &sink{}
		startStoreRelay(t, s, sk, relay.Config{MaxEventBytes: limit})

		await(t, 15*time.Second, func() bool {
			st := s.statuses(t)
			return st["failed"] == len(large) && st["sent"] == len(small)
		}, "rows not settled: %v", s.statuses(t))
		rows := s.rows(t)
		for _, id := range large {
			r := rows[id]
			if r.Attempt != 1 || r.LastError == nil || !strings.HasPrefix(*r.LastError, fmt.Sprintf("event too large: %d", 2*limit/10)) ||
				!strings.Contains(*r.LastError, fmt.Sprintf("exceed the limit of %d", limit)) {
				t.Errorf("row of a %d-byte payload: %v; want failed on attempt 1, its size and the limit in last_error", 2*limit, r)
			}
		}
		for i := range sk.callCount() {
			for _, m := range sk.call(i) {
				if slices.Contains(large, m.ID) || len(m.Payload) > limit {
					t.Errorf("the sink got event %s with a payload of %d bytes", m.ID, len(m.Payload))
				}
			}
		}
		if acked := sk.ackedByID(); len(acked) != len(small) {
			t.Errorf("the sink acknowledged %d events, want the %d small ones", len(acked), len(small))
		}
	})
}

// --batch-bytes bounds the very first claim, before the adaptive size has
// seen a row: with room for 100 rows, a claim of rows of 300 bytes stops
// at the fourth, whose bytes reach 1,000, and takes the rest in later
// claims.
func TestStoresFirstClaimStopsAtBatchBytes(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		msgs := make([]outbox.Message, 10)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: "orders", Payload: bytes.Repeat([]byte{'a' + byte(i)}, 300)}
		}
		s.write(t, msgs...)
		r := s.newRelay(t, &sink{}, relay.Config{BatchMin: 100, BatchSize: 100, BatchBytes: 1000})
		var claims []int
		for sent := 0; sent < len(msgs) && len(claims) < len(msgs); {
			res, err := r.ProcessBatch(context.Background(), 0)
			if err != nil {
				t.Fatalf("ProcessBatch: %v", err)
			}
			if res.Sent != res.Claimed {
				t.Fatalf("ProcessBatch = %+v, want every row claimed sent", res)
			}
			claims, sent = append(claims, res.Claimed), sent+res.Sent
		}
		if !slices.Equal(claims, []int{4, 4, 2}) {
			t.Errorf("claims took %v rows, want 4, 4, 2: rows up to the one whose bytes reach 1,000", claims)
		}
	})
}

// Lock claims and ordered claims are bounded as lease claims are: from the
// first claim on, none holds rows past the one at which their bytes reach
// BatchBytes, and a row above MaxEventBytes fails unread.
func TestLockAndOrderedClaimsBoundWhatTheyRead(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cfg  relay.Config
	}{
		{"lock", relay.Config{Claim: relay.ClaimLock}},
		{"ordered", relay.Config{Ordering: relay.Ordering{Topics: []string{"*"}, Shards: 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			msgs := make([]outbox.Message, 10)
			for i := range msgs {
				msgs[i] = outbox.Message{Topic: "orders", Key: []byte("k"), Payload: bytes.Repeat([]byte{'a' + byte(i)}, 300)}
			}
			b.write(msgs...)
			big := uuid.Must(uuid.NewV7())
			b.exec("INSERT INTO "+b.table.Ident()+" (id, topic, key, payload) VALUES ($1, 'orders', 'k', $2)", big, bytes.Repeat([]byte("L"), 5000))
			claims := &claimSizes{}
			cfg := c.cfg
			cfg.BatchMin, cfg.BatchSize, cfg.BatchBytes, cfg.MaxEventBytes, cfg.Observer = 100, 100, 1000, 2000, claims
			sk := &sink{}
			b.startRelay(sk, cfg)

			await(t, 15*time.Second, func() bool { return b.count("status = 'sent'") == len(msgs) && b.count("status = 'failed'") == 1 },
				"rows not settled: %v", b.statuses())
			if r := b.row(big); r.LastError == nil || !strings.HasPrefix(*r.LastError, "event too large: 5") {
				t.Errorf("the row of 5,000 bytes: %s, last_error %v; want it failed as too large", r.Status, deref(r.LastError))
			}
			if _, ok := sk.ackedByID()[big]; ok {
				t.Error("the sink got the row of 5,000 bytes")
			}
			got := claims.get()
			if len(got) == 0 || got[0] != 4 || slices.Max(got) > 4 {
				t.Errorf("claims took %v rows; want 4 first and never more: rows up to the one whose bytes reach 1,000", got)
			}
		})
	}
}
