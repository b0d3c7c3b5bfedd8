package publisherstest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// testEndedContext: Publish under a context that already ended fails every
// message at once, never as permanent, and sends nothing.
func (s *suite) testEndedContext(t *testing.T) {
	p := s.publisher(t)
	topic := s.h.Topic(t)
	mustPublish(t, p, []outbox.Message{msg(topic, "warm", "connections in place")})
	before := len(s.h.Read(t, topic))

	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()
	for name, ctx := range map[string]context.Context{"canceled": canceled, "past deadline": expired} {
		msgs := []outbox.Message{msg(topic, "a", name), msg(topic, "b", name)}
		start := time.Now()
		errs := publish(t, ctx, p, msgs)
		if took := time.Since(start); took > bound {
			t.Errorf("Publish with a %s context took %v", name, took)
		}
		for i, err := range errs {
			if err == nil || publishersIsPermanent(err) {
				t.Errorf("Publish with a %s context: message %d: %s (%v), want a failure that is not permanent", name, i, class(err), err)
			}
		}
	}
	if after := s.h.Read(t, topic); len(after) != before {
		t.Errorf("Publish calls whose context had ended made %d records arrive", len(after)-before)
	}
}

// testClose: Close returns within a bound, and a Publish after Close fails
// without blaming the messages (never permanent).
func (s *suite) testClose(t *testing.T) {
	p := s.publisher(t)
	topic := s.h.Topic(t)
	mustPublish(t, p, []outbox.Message{msg(topic, "k", "before close")})
	closeBounded(t, p)
	err := p.Publish(ctxTimeout(t, publishTimeout), []outbox.Message{msg(topic, "k", "after close")})
	if publishersIsPermanent(err) {
		t.Errorf("Publish after Close = %v: permanent, which would fail rows for the publisher's state", err)
	}
}

// testProbe: a Prober answers nil while the broker is up, and fails at
// once under an ended context.
func (s *suite) testProbe(t *testing.T) {
	s.require(t, s.h.Features.Prober, "Prober", "it does not implement publishers.Prober")
	pr := s.prober(t, s.publisher(t))
	if err := pr.Probe(ctxTimeout(t, publishTimeout)); err != nil {
		t.Errorf("Probe of a healthy broker: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if err := pr.Probe(ctx); err == nil {
		t.Error("Probe with a canceled context returned nil")
	}
	if took := time.Since(start); took > bound {
		t.Errorf("Probe with a canceled context took %v", took)
	}
}

// prober returns p as a publishers.Prober, failing t when the sink declared
// Prober but p is not one.
func (s *suite) prober(t *testing.T, p publishers.Publisher) publishers.Prober {
	t.Helper()
	pr, ok := p.(publishers.Prober)
	if !ok {
		t.Fatalf("%s declares Features.Prober, but %T does not implement publishers.Prober", s.h.Name, p)
	}
	return pr
}

// publishAsync starts Publish in a goroutine; the channel receives its
// result and how long it took.
func publishAsync(ctx context.Context, p publishers.Publisher, msgs []outbox.Message) <-chan timedResult {
	done := make(chan timedResult, 1)
	start := time.Now()
	go func() {
		err := p.Publish(ctx, msgs)
		done <- timedResult{err, time.Since(start)}
	}()
	return done
}

type timedResult struct {
	err  error
	took time.Duration
}

// await waits for a result of publishAsync until limit has passed since
// the call started.
func await(t *testing.T, done <-chan timedResult, limit time.Duration, what string) (timedResult, bool) {
	t.Helper()
	select {
	case r := <-done:
		if r.took > limit {
			t.Errorf("%s: Publish returned after %v, more than %v", what, r.took.Round(time.Millisecond), limit)
		}
		return r, true
	case <-time.After(limit + bound):
		t.Errorf("%s: Publish has not returned %v after it should have (within %v)", what, bound, limit)
		return timedResult{}, false
	}
}

// stalled returns a publisher whose connections to the broker are in
// place (one message published) and a topic, with the broker then made
// silent; the broker is healed when the test ends. It requires
// Features.Stall.
func (s *suite) stalled(t *testing.T) (publishers.Publisher, string) {
	t.Helper()
	s.require(t, s.h.Features.Stall, "Stall", "its Publish cannot be interrupted while the broker is silent")
	p := s.publisher(t)
	topic := s.h.Topic(t)
	mustPublish(t, p, []outbox.Message{msg(topic, "warm", "connections in place")})
	s.healOnCleanup(t)
	s.h.Stall()
	return p, topic
}

// testStalledDeadline: Publish to a silent broker returns about when its
// context's deadline passes, failing every message, not permanently.
func (s *suite) testStalledDeadline(t *testing.T) {
	p, topic := s.stalled(t)
	const deadline = 500 * time.Millisecond
	msgs := []outbox.Message{msg(topic, "a", "stalled 1"), msg(topic, "b", "stalled 2")}
	ctx := ctxTimeout(t, deadline)
	r, ok := await(t, publishAsync(ctx, p, msgs), deadline+bound, "silent broker, deadline "+deadline.String())
	if !ok {
		return
	}
	checkStalledResult(t, r.err, len(msgs))
	if r.err != nil && !errors.Is(r.err, context.DeadlineExceeded) && class(r.err) != "unavailable" {
		t.Logf("note: the error neither wraps context.DeadlineExceeded nor is unavailable: %v", r.err)
	}
	s.h.Heal()
	mustPublish(t, p, []outbox.Message{msg(topic, "after", "healed")})
}

// testStalledCancel: cancelling the context of a Publish stuck on a silent
// broker makes it return at once.
func (s *suite) testStalledCancel(t *testing.T) {
	p, topic := s.stalled(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	msgs := []outbox.Message{msg(topic, "a", "stalled")}
	const after = 300 * time.Millisecond
	time.AfterFunc(after, cancel)
	r, ok := await(t, publishAsync(ctx, p, msgs), after+bound, fmt.Sprintf("silent broker, canceled after %v", after))
	if ok {
		checkStalledResult(t, r.err, len(msgs))
	}
	s.h.Heal()
	mustPublish(t, p, []outbox.Message{msg(topic, "after", "healed")})
}

// testStalledClose: Close returns within a bound while a Publish is stuck
// on a silent broker, and that Publish still ends with its context.
func (s *suite) testStalledClose(t *testing.T) {
	p, topic := s.stalled(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	msgs := []outbox.Message{msg(topic, "a", "stalled")}
	done := publishAsync(ctx, p, msgs)
	const after = 300 * time.Millisecond
	closed := make(chan time.Duration, 1)
	time.AfterFunc(after, func() {
		start := time.Now()
		_ = p.Close()
		closed <- time.Since(start)
	})
	select {
	case took := <-closed:
		if took > bound {
			t.Errorf("Close took %v while a Publish was stuck", took.Round(time.Millisecond))
		}
	case <-time.After(after + 2*bound):
		t.Fatalf("Close has not returned %v after it was called while a Publish was stuck", 2*bound)
	}
	cancelAt := time.Now()
	cancel()
	select {
	case r := <-done:
		checkStalledResult(t, r.err, len(msgs))
	case <-time.After(bound):
		t.Errorf("Publish has not returned %v after its context was canceled (Close was called before)", time.Since(cancelAt).Round(time.Millisecond))
	}
	s.h.Heal()
}

// checkStalledResult checks the result of a Publish that could not get an
// answer: every message failed, none permanently.
func checkStalledResult(t *testing.T, err error, n int) {
	t.Helper()
	for i, e := range perMessage(t, err, n) {
		if e == nil || publishersIsPermanent(e) {
			t.Errorf("message %d: %s (%v), want a failure that is not permanent: the broker never answered", i, class(e), e)
		}
	}
}
