package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/internal/history"
)

// The run's inbox consumers: consumerInstances instances of one consumer
// read the run's topics with the sink's own client, as an application
// would, racing for them, and apply each delivery through the inbox
// (package inbox): one effect row in the consumer's own database
// (effects). After crashShare of the deliveries, drawn from the run's
// seed, an instance crashes between the effect's commit and the
// acknowledgement: it drops its client without acknowledging that
// delivery or any after it, and a fresh instance takes its place, so the
// broker delivers them again. The checker wants exactly one effect per
// committed event.
const (
	consumerName      = "chaos-consumer"
	consumerInstances = 2
	crashShare        = 0.001
	// consumerIdle ends the wait for the consumers to catch up when the
	// effects stop growing for this long.
	consumerIdle = 30 * time.Second
	// consumerPause is an instance's wait before it starts again after a
	// failure (its database or broker down), not after a crash.
	consumerPause = 250 * time.Millisecond
)

// consumerSource is a sink's consumer client.
type consumerSource interface {
	// instance consumes the run's topics as one instance of consumerName
	// and acknowledges each delivery once handle returned true. When
	// handle returns false, instance returns at once without
	// acknowledging that delivery or any after it, dropping its client.
	// It returns nil then and when ctx ends, an error when its client
	// fails.
	instance(ctx context.Context, handle func(context.Context, inbox.Message) bool) error
}

// consumerSources make the consumer clients of the sinks that have one.
var consumerSources = map[string]func(s *sink, topics []string) consumerSource{
	"kafka": newKafkaSource,
	"nats":  newNATSSource,
	"redis": newRedisSource,
}

// consumers are the run's consumer instances and what they counted.
type consumers struct {
	store effects
	src   consumerSource
	stop  context.CancelFunc
	wg    sync.WaitGroup

	// handled counts the deliveries Handle applied or found duplicate;
	// duplicates the latter; crashes the instances crashed on purpose;
	// failures the deliveries or clients that failed (an instance
	// restarts after each); noID the deliveries without an event id.
	handled, duplicates, crashes, failures, noID atomic.Int64

	mu      sync.Mutex
	lastErr error
}

// startConsumers starts the consumer instances on the run's topics
// ("" left out), or returns nil when the sink has no consumer client.
func startConsumers(ctx context.Context, t *testing.T, db database, sk *sink, seed uint64, topics ...string) *consumers {
	newSource := consumerSources[sk.name]
	if newSource == nil {
		t.Logf("inbox consumers: none for sink %s (kafka, nats and redis have them)", sk.name)
		return nil
	}
	var names []string
	for _, topic := range topics {
		if topic != "" {
			names = append(names, topic)
		}
	}
	c := &consumers{store: db.effects(ctx, t), src: newSource(sk, names)}
	runCtx, stop := context.WithCancel(ctx)
	c.stop = stop
	t.Cleanup(c.halt)
	for i := range consumerInstances {
		c.wg.Go(func() { c.run(runCtx, rand.New(rand.NewPCG(seed, 300+uint64(i)))) })
	}
	return c
}

// halt stops the instances and waits for them.
func (c *consumers) halt() {
	c.stop()
	c.wg.Wait()
}

// run runs instances one after another until ctx ends: a fresh one after
// each crash or failure.
func (c *consumers) run(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		failed := false
		err := c.src.instance(ctx, func(ctx context.Context, m inbox.Message) bool {
			duplicate, err := c.store.handle(ctx, m)
			switch {
			case errors.Is(err, inbox.ErrNoEventID):
				c.noID.Add(1)
				return true // nothing to apply: acknowledged
			case err != nil:
				failed = true
				c.fail(ctx, err)
				return false
			}
			c.handled.Add(1)
			if duplicate {
				c.duplicates.Add(1)
			}
			if rng.Float64() < crashShare {
				c.crashes.Add(1)
				return false
			}
			return true
		})
		if err != nil {
			failed = true
			c.fail(ctx, err)
		}
		if failed {
			sleep(ctx, consumerPause)
		}
	}
}

// fail counts a failure that is not the end of the run.
func (c *consumers) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	c.failures.Add(1)
	c.mu.Lock()
	c.lastErr = err
	c.mu.Unlock()
}

// check waits until an effect exists for every event id of records (or
// the effects stop growing for consumerIdle, or timeout passes), stops the
// consumers and checks the effects against the producer's history: one
// effect for each committed event, at most one for an event whose commit
// had an unknown outcome, none for any other. It reports each problem
// with t.Errorf and returns the summary's part.
func (c *consumers) check(ctx context.Context, t *testing.T, txns []history.Txn, records []record, timeout time.Duration) string {
	published := map[string]bool{}
	for _, r := range records {
		if r.EventID != "" {
			published[r.EventID] = true
		}
	}
	begin := time.Now()
	last, lastAt := -1, begin
	for {
		n, err := c.store.distinct(ctx)
		if err == nil && n >= len(published) {
			break
		}
		if err == nil && n != last {
			last, lastAt = n, time.Now()
		}
		if time.Since(lastAt) > consumerIdle || time.Since(begin) > timeout {
			t.Errorf("inbox consumers: effects for %d of the %d events the sink holds, no progress for %s (last error: %v)",
				last, len(published), time.Since(lastAt).Round(time.Second), c.err())
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	catchUp := time.Since(begin)
	c.halt()

	counts, err := c.store.counts(ctx)
	if err != nil {
		t.Fatalf("inbox consumers: count the effects: %v", err)
	}
	j := judgeEffects(txns, counts)
	for _, p := range []struct {
		what string
		ids  []string
	}{
		{"committed events without an effect", j.missing},
		{"events whose effect was applied more than once", j.double},
		{"effects of events never committed", j.never},
	} {
		if len(p.ids) > 0 {
			t.Errorf("inbox consumers: %d %s, e.g. %v", len(p.ids), p.what, p.ids[:min(len(p.ids), 5)])
		}
	}
	if n := c.noID.Load(); n > 0 {
		t.Errorf("inbox consumers: %d deliveries without a valid event id", n)
	}
	return fmt.Sprintf("inbox: consumers=%d committed_events=%d effects=%d (%d of events of unknown outcome) missing=%d double=%d never_committed=%d "+
		"handled=%d duplicates_absorbed=%d crashes=%d failures=%d catch_up=%s",
		consumerInstances, j.committed, j.effects, j.ofUnknown, len(j.missing), len(j.double), len(j.never), c.handled.Load(), c.duplicates.Load(),
		c.crashes.Load(), c.failures.Load(), catchUp.Round(time.Millisecond))
}

// judgement is what judgeEffects found.
type judgement struct {
	// committed counts the committed events; effects the effect rows,
	// ofUnknown those of events whose commit had an unknown outcome.
	committed, effects, ofUnknown int
	// missing are the committed events without an effect, double those
	// with more than one ("id xN"), never the events with an effect that
	// were rolled back or never written.
	missing, double, never []string
}

// judgeEffects compares the effect rows per event id with the producer's
// history: one effect for each committed event, at most one for an event
// whose commit had an unknown outcome, none for any other.
func judgeEffects(txns []history.Txn, counts map[string]int) judgement {
	var j judgement
	outcome := map[string]history.Outcome{}
	for _, tx := range txns {
		for _, ev := range tx.Events {
			outcome[ev.ID] = tx.Outcome
		}
	}
	for id, o := range outcome {
		n := counts[id]
		switch {
		case o == history.Committed && n == 0:
			j.missing = append(j.missing, id)
		case o == history.RolledBack && n > 0:
			j.never = append(j.never, id)
		case n > 1:
			j.double = append(j.double, fmt.Sprintf("%s x%d", id, n))
		}
		switch o {
		case history.Committed:
			j.committed++
		case history.Unknown:
			j.ofUnknown += n
		}
	}
	for id, n := range counts {
		j.effects += n
		if _, ok := outcome[id]; !ok {
			j.never = append(j.never, id)
		}
	}
	slices.Sort(j.missing)
	slices.Sort(j.double)
	slices.Sort(j.never)
	return j
}

// TestJudgeEffects checks the checker of the inbox consumers on a small
// history.
func TestJudgeEffects(t *testing.T) {
	txns := []history.Txn{
		{Outcome: history.Committed, Events: []history.Event{{ID: "c1"}, {ID: "c2"}, {ID: "c3"}}},
		{Outcome: history.Unknown, Events: []history.Event{{ID: "u1"}, {ID: "u2"}, {ID: "u3"}}},
		{Outcome: history.RolledBack, Events: []history.Event{{ID: "r1"}, {ID: "r2"}}},
	}
	j := judgeEffects(txns, map[string]int{"c1": 1, "c3": 2, "u1": 1, "u2": 3, "r1": 1, "x": 1})
	want := judgement{committed: 3, effects: 9, ofUnknown: 4,
		missing: []string{"c2"}, double: []string{"c3 x2", "u2 x3"}, never: []string{"r1", "x"}}
	if !reflect.DeepEqual(j, want) {
		t.Errorf("judgeEffects = %+v, want %+v", j, want)
	}
	j = judgeEffects(txns, map[string]int{"c1": 1, "c2": 1, "c3": 1, "u3": 1})
	if len(j.missing)+len(j.double)+len(j.never) > 0 || j.effects != 4 || j.ofUnknown != 1 {
		t.Errorf("judgeEffects of a clean run = %+v, want no problem, 4 effects, 1 of unknown outcome", j)
	}
}

func (c *consumers) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}
