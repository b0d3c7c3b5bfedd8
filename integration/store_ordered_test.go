package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// The ordered cases of the store suite: each runs on PostgreSQL and on
// MariaDB with the same assertions (docs/ordering.md#the-promise).

// storeOrderedConfig is a relay config with every topic ordered over shards
// shards and short backoffs.
func storeOrderedConfig(shards int, hol relay.HeadOfLine) relay.Config {
	return relay.Config{BatchSize: 10, BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, Lease: 2 * time.Second,
		Ordering: relay.Ordering{Topics: []string{"*"}, Shards: shards, Loops: 2, HeadOfLine: hol}}
}

// keyOrder returns, per key, the payloads of the first copies sk
// acknowledged, in the order it acknowledged them.
func keyOrder(sk *sink) map[string][]string {
	seen := map[string]bool{}
	got := map[string][]string{}
	for _, m := range sk.ackedMessages() {
		if !seen[m.ID.String()] {
			seen[m.ID.String()] = true
			got[string(m.Key)] = append(got[string(m.Key)], string(m.Payload))
		}
	}
	return got
}

// Three relays, many keys, a tenth of the transactions rolled back and a
// sink that fails a fifth of the first tries: each key's committed events
// reach the sink in write order.
func TestStoresOrderedThreeRelaysKeepKeyOrder(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		s.prepareOrdered(t)
		const keys, perKey = 30, 8
		var mu sync.Mutex
		tried := map[string]bool{}
		sk := &sink{fn: func(_ context.Context, msgs []outbox.Message) error {
			mu.Lock()
			defer mu.Unlock()
			errs := make(publishers.Errors, len(msgs))
			for i, m := range msgs {
				if !tried[m.ID.String()] && rand.IntN(5) == 0 {
					errs[i] = errors.New("flaky")
				}
				tried[m.ID.String()] = true
			}
			return publishers.Summarize(errs)
		}}
		for i := range 3 {
			cfg := storeOrderedConfig(4, relay.HeadOfLineWait)
			cfg.ID = fmt.Sprintf("r%d", i)
			startStoreRelay(t, s, sk, cfg)
		}
		want := map[string][]string{}
		for seq := range perKey {
			for k := range keys {
				key := fmt.Sprintf("k%02d", k)
				m := outbox.Message{Topic: "orders", Key: []byte(key), Payload: fmt.Appendf(nil, "%d", seq)}
				if rand.IntN(10) == 0 {
					_, end := s.writeOpen(t, m)
					end(false)
					continue
				}
				s.write(t, m)
				want[key] = append(want[key], string(m.Payload))
			}
		}
		total := 0
		for _, w := range want {
			total += len(w)
		}
		await(t, 90*time.Second, func() bool { return countStatus(t, s, "sent") == total }, "not all sent: %v", s.statuses(t))
		got := keyOrder(sk)
		for k, w := range want {
			if fmt.Sprint(got[k]) != fmt.Sprint(w) {
				t.Errorf("key %s arrived as %v, want %v", k, got[k], w)
			}
		}
	})
}

// An earlier write of a key whose transaction commits after a later one
// was written arrives first; a rolled-back write leaves no gap that holds
// the key.
func TestStoresOrderedEarlierWriteCommittedLater(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		s.prepareOrdered(t)
		sk := &sink{}
		startStoreRelay(t, s, sk, storeOrderedConfig(2, relay.HeadOfLineWait))
		msg := func(p string) outbox.Message {
			return outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte(p)}
		}
		_, endA := s.writeOpen(t, msg("a"))
		wroteB := make(chan struct{})
		go func() { // PostgreSQL commits it at once, MariaDB waits for A's transaction
			defer close(wroteB)
			s.write(t, msg("b"))
		}()
		select {
		case <-wroteB: // PostgreSQL: b is committed, a not yet
		case <-time.After(200 * time.Millisecond): // MariaDB: b waits on k's counter
		}
		endA(true)
		<-wroteB
		_, endC := s.writeOpen(t, msg("c"))
		endC(false)
		s.write(t, msg("d"))
		await(t, 30*time.Second, func() bool { return countStatus(t, s, "sent") == 3 }, "not all sent: %v", s.statuses(t))
		if got := keyOrder(sk)["k"]; fmt.Sprint(got) != "[a b d]" {
			t.Fatalf("k arrived as %v, want [a b d]", got)
		}
	})
}

// Head of line: a key whose first event the sink keeps refusing waits
// (wait: until it fails after its attempts) or sets it aside at once
// (park); its later events follow only then, other keys flow meanwhile.
func TestStoresOrderedHeadOfLine(t *testing.T) {
	t.Parallel()
	for _, hol := range []relay.HeadOfLine{relay.HeadOfLineWait, relay.HeadOfLinePark} {
		t.Run(string(hol), func(t *testing.T) {
			t.Parallel()
			forEachStore(t, func(t *testing.T, s storeBackend) {
				s.prepareOrdered(t)
				sk := &sink{fn: func(_ context.Context, msgs []outbox.Message) error {
					errs := make(publishers.Errors, len(msgs))
					for i, m := range msgs {
						if string(m.Payload) == "poison" {
							errs[i] = errors.New("refused")
						}
					}
					return publishers.Summarize(errs)
				}}
				cfg := storeOrderedConfig(2, hol)
				cfg.MaxAttempts = 3
				startStoreRelay(t, s, sk, cfg)
				head := s.write(t, outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("poison")})
				s.write(t, outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("next")})
				s.write(t, outbox.Message{Topic: "orders", Key: []byte("j"), Payload: []byte("other")})
				await(t, 30*time.Second, func() bool { return countStatus(t, s, "sent") == 2 }, "not sent: %v", s.statuses(t))
				row := s.rows(t)[head[0].ID]
				if row.Status != "failed" || row.LastError == nil {
					t.Fatalf("head: %v, want failed", row)
				}
				wantAttempts, wantPrefix := 3, "attempt 3 of 3"
				if hol == relay.HeadOfLinePark {
					wantAttempts, wantPrefix = 1, "parked: "
				}
				if row.Attempt != wantAttempts || !strings.HasPrefix(*row.LastError, wantPrefix) {
					t.Errorf("head: attempt %d, %q; want %d, %q...", row.Attempt, *row.LastError, wantAttempts, wantPrefix)
				}
				if got := keyOrder(sk)["k"]; fmt.Sprint(got) != "[next]" {
					t.Errorf("k arrived as %v, want [next] after its head failed", got)
				}
			})
		})
	}
}
