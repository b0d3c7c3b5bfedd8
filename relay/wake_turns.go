package relay

import (
	"context"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
	"sync"
	"time"
)

// turns shares the wake-ups among the unordered workers, so that Workers
// claim loops cost the database about as much as one when there is little
// to do, and claim side by side when there is a backlog:
//
//   - a notification is taken by one worker: the first whose claim starts
//     after it. The others find it covered and wait on;
//   - while a worker has a batch in flight, notifications wait for it: when
//     its publish is over, one worker claims what arrived meanwhile in one
//     batch, as a single worker would, while the first records its
//     outcome. Splitting a trickle of events over several workers would
//     only mean more, smaller batches, that is more statements and commits
//     for the same events. A batch that takes long (a slow sink)
//     holds them back for about a poll interval at most: polls still run;
//   - a poll is skipped when another worker's claim started within the last
//     half PollInterval;
//   - a worker whose claim filled its batch invites another one as soon
//     as the claim returns (invitingClaims): more rows are likely
//     waiting, so an idle worker claims the next batch while this one
//     publishes.
type turns struct {
	mu       sync.Mutex
	ch       chan struct{} // closed by the next signal or invitation
	signals  uint64        // notifications so far
	covered  uint64        // notifications that a started claim covers
	invited  bool          // an invitation no worker has taken yet
	busy     int           // workers between begin and done: batches in flight
	lastTurn time.Time     // when the last claim started
}

func newTurns() *turns { return &turns{ch: make(chan struct{})} }

// wake wakes the waiting workers and closes the current channel.
// Callers hold mu.
func (t *turns) wake() {
	close(t.ch)
	t.ch = make(chan struct{})
}

// signal records a notification: an insert committed.
func (t *turns) signal() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.signals++
	t.wake()
}

// invite asks an idle worker to claim the next batch.
func (t *turns) invite() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.invited = true
	t.wake()
}

// begin records that a claim starts now: it will see every insert
// notified so far. It returns the channel the next signal or invitation
// closes, for the worker to wait on after its claim.
func (t *turns) begin() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.busy++
	t.covered = t.signals
	t.lastTurn = time.Now()
	return t.ch
}

// done records that the batch begin started no longer holds the turn: it
// is published (its outcome may still be being recorded), or abandoned.
// Notifications that came meanwhile wake the waiting workers, so that one
// claims them now.
func (t *turns) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.busy--
	if t.busy == 0 && t.covered < t.signals {
		t.wake()
	}
}

// take reports whether a woken worker should claim: an invitation waits,
// or a notification came that no started claim covers and no batch is in
// flight (its worker will claim it when done). When it should not, it
// returns the channel to wait on next.
func (t *turns) take() (bool, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.invited:
		t.invited = false
		return true, nil
	case t.covered < t.signals && t.busy == 0:
		t.covered = t.signals
		return true, nil
	}
	return false, t.ch
}

// pollDue reports whether a worker whose poll interval d ran out should
// claim: no claim started within the last d/2.
func (t *turns) pollDue(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return time.Since(t.lastTurn) >= d/2
}

// pollWait is a worker's wait for its next poll after a batch that was not
// full, given its previous wait and whether the batch found rows. A
// listening relay is woken by notifications and polls every PollInterval.
// One that does not listen polls PollMin after a claim that found rows and
// doubles the wait after each that found none, up to PollInterval.
func pollWait(cfg Config, listening bool, prev time.Duration, found bool) time.Duration {
	switch {
	case listening:
		return cfg.PollInterval
	case found:
		return cfg.PollMin
	}
	return min(2*prev, cfg.PollInterval)
}

// await waits until this worker should claim again: its turn for a
// notification or an invitation (woken is the channel begin returned), or
// a poll after d that is due, or the end of ctx.
func (t *turns) await(ctx context.Context, woken <-chan struct{}, d time.Duration) {
	poll := time.NewTimer(d)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-woken:
			var mine bool
			if mine, woken = t.take(); mine {
				return
			}
		case <-poll.C:
			if t.pollDue(d) {
				return
			}
			poll.Reset(d)
		}
	}
}

// invitingClaims are a worker's claims (not its probes): one that comes
// back full invites another worker before its batch is published.
type invitingClaims struct {
	claimer
	turns *turns
	bytes store.Bounds
}

func (c invitingClaims) claim(ctx, hard context.Context, owner string, limit int) (*batch, error) {
	b, err := c.claimer.claim(ctx, hard, owner, limit)
	if b != nil && c.bytes.Full(limit, b.rows) {
		c.turns.invite()
	}
	return b, err
}
