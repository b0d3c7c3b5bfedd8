package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A notification goes to one worker; a claim that started after it covers
// it; an invitation is taken once.
func TestTurns(t *testing.T) {
	tr := newTurns()
	a, b := tr.begin(), tr.begin() // two workers claimed, found little, wait
	tr.done()
	tr.done()
	if mine, _ := tr.take(); mine {
		t.Fatal("take with nothing new: want false")
	}
	tr.signal()
	if !closed(a) || !closed(b) {
		t.Fatal("a signal must wake every waiting worker")
	}
	if mine, _ := tr.take(); !mine {
		t.Fatal("first take after a signal: want true")
	}
	mine, next := tr.take()
	if mine || closed(next) {
		t.Fatalf("second take after one signal: got %v (channel closed %v), want false and an open channel", mine, closed(next))
	}

	tr.signal()
	tr.begin() // a claim starting now sees the insert just notified
	if mine, _ := tr.take(); mine {
		t.Fatal("take after a claim began: the signal is covered, want false")
	}
	tr.signal() // arrives while that batch is in flight: it waits for it
	mine, idle := tr.take()
	if mine {
		t.Fatal("take while a batch is in flight: want false, a worker claims when its publish is over")
	}
	tr.done() // published: the worker records its outcome, another may claim
	if !closed(idle) {
		t.Fatal("done with a notification waiting must wake the waiting workers")
	}
	if mine, _ := tr.take(); !mine {
		t.Fatal("take once the batch is done: want true")
	}
	tr.begin()
	_, idle = tr.take()
	tr.done()
	if closed(idle) {
		t.Fatal("done with nothing new must not wake the waiting workers")
	}

	tr.begin() // in flight again: an invitation is taken all the same
	_, next = tr.take()
	tr.invite()
	if !closed(next) {
		t.Fatal("an invitation must wake the waiting workers")
	}
	if mine, _ := tr.take(); !mine {
		t.Fatal("take after an invitation: want true")
	}
	if mine, _ := tr.take(); mine {
		t.Fatal("an invitation is taken once")
	}
	tr.done()
}

// A poll is due only when no claim started within the last half interval.
func TestTurnsPollDue(t *testing.T) {
	tr := newTurns()
	if !tr.pollDue(time.Hour) {
		t.Fatal("no claim yet: want due")
	}
	tr.begin()
	tr.done()
	if tr.pollDue(time.Hour) {
		t.Fatal("a claim just started: want not due")
	}
	if !tr.pollDue(0) {
		t.Fatal("interval 0: want due")
	}
}

// A listening relay polls every PollInterval; one that does not polls
// PollMin after finding rows and backs off, doubling, to PollInterval.
func TestPollWait(t *testing.T) {
	cfg := Config{PollInterval: 400 * time.Millisecond, PollMin: 5 * time.Millisecond}
	if got := pollWait(cfg, true, 5*time.Millisecond, true); got != 400*time.Millisecond {
		t.Errorf("listening relay after rows: %v, want the poll interval", got)
	}
	wait := pollWait(cfg, false, 400*time.Millisecond, true)
	if wait != 5*time.Millisecond {
		t.Fatalf("after rows: %v, want PollMin", wait)
	}
	var waits []time.Duration
	for range 8 {
		wait = pollWait(cfg, false, wait, false)
		waits = append(waits, wait)
	}
	want := []time.Duration{10, 20, 40, 80, 160, 320, 400, 400}
	for i := range want {
		if waits[i] != want[i]*time.Millisecond {
			t.Fatalf("waits after empty claims = %v, want %v ms", waits, want)
		}
	}
	if got := pollWait(cfg, false, wait, true); got != 5*time.Millisecond {
		t.Errorf("rows after idling: %v, want PollMin", got)
	}
}

// After a wake-up that found no ordered row ready, the loop looks again
// soon and at most settleMax apart for one poll interval, however long
// that is: a row held back by a transaction elsewhere goes out within
// about a second of its end, not a doubling wait later. Then it polls.
func TestSettlingLooksAtMostASecondApart(t *testing.T) {
	t.Parallel()
	const poll = time.Minute
	var s settling
	if w := s.wait(poll, time.Now()); w != poll {
		t.Fatalf("before a wake-up: wait %v, want the poll interval", w)
	}
	start := time.Now()
	s.woken(start)
	now, looks := start, 0
	for now.Sub(start) < poll {
		w := s.wait(poll, now)
		if w > settleMax {
			t.Fatalf("%v after the wake-up: wait %v, want at most %v", now.Sub(start), w, settleMax)
		}
		now = now.Add(w)
		looks++
	}
	if w := s.wait(poll, now); w != poll {
		t.Fatalf("%v after the wake-up (%d looks): wait %v, want the poll interval again", now.Sub(start), looks, w)
	}
}

// overlapPublisher holds each publish until a second one has started, or
// its context ends.
type overlapPublisher struct {
	n      atomic.Int32
	second chan struct{}
}

func (p *overlapPublisher) Publish(ctx context.Context, _ []outbox.Message) error {
	if p.n.Add(1) == 2 {
		close(p.second)
	}
	select {
	case <-p.second:
	case <-ctx.Done():
	}
	return nil
}

func (p *overlapPublisher) Close() error { return nil }

// A claim that comes back full invites an idle worker at once, to claim
// the next batch while the first is published. The relay here polls once
// an hour and the sink holds the first publish until a second one starts:
// only the invitation can make them overlap.
func TestFullClaimInvitesAWorkerWhileItPublishes(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	var claims atomic.Int32
	r := quietRelay(t, pool, &overlapPublisher{second: make(chan struct{})}, Config{
		Table: table, Workers: 2, BatchSize: 10, BatchMin: 10,
		PollInterval: time.Hour, PublishTimeout: time.Hour,
		Observer: ObserverFunc(func(e Event) {
			if e.Kind == EventClaimed {
				claims.Add(1)
			}
		}),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	// Both workers are idle: each claimed once (finding nothing), the
	// listener connected and no batch is in flight.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.turns.mu.Lock()
		idle := claims.Load() >= 2 && r.turns.signals > 0 && r.turns.busy == 0
		r.turns.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the workers did not become idle within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	testdb.InsertPending(t, pool, table, 20)
	testdb.AwaitSent(t, pool, table, 20, time.Minute)
}
