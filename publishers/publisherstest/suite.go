package publisherstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// bound is how long past its context's end a Publish, or how long a Close,
// may take. It is generous for slow machines and the race detector, and
// far below the request timeouts a sink that ignored its context would
// wait for.
const bound = 3 * time.Second

// publishTimeout bounds the Publish calls that are expected to succeed.
const publishTimeout = 30 * time.Second

// Run runs the conformance suite against the sink h describes, as subtests
// of t. See the package documentation for what it checks.
func Run(t *testing.T, h Harness) {
	t.Helper()
	h.check(t)
	s := &suite{h: h}
	// Subtests that fault the broker run one at a time while Run's body
	// runs; parallel subtests resume only after it returns.
	t.Run("AcknowledgedIsDurable", s.testAcknowledgedIsDurable)
	t.Run("Outage", s.testOutage)
	t.Run("StalledPublishHonoursDeadline", s.testStalledDeadline)
	t.Run("StalledPublishHonoursCancel", s.testStalledCancel)
	t.Run("CloseIsBoundedDuringStalledPublish", s.testStalledClose)
	t.Run("KeyBatchesUnderCut", s.testKeyBatchesUnderCut)

	parallel := func(name string, f func(*testing.T)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t)
		})
	}
	parallel("EmptyPublish", s.testEmpty)
	parallel("MessagesArriveIntact", s.testIntact)
	parallel("KeyOrderWithinPublish", s.testKeyOrder)
	parallel("KeyBatchesDeclared", s.testKeyBatchesDeclared)
	parallel("LargeBatch", s.testLargeBatch)
	parallel("ConcurrentPublish", s.testConcurrent)
	parallel("PerMessageErrors", s.testPerMessageErrors)
	parallel("AllRejected", s.testAllRejected)
	parallel("TooLargeIsPermanent", s.testTooLarge)
	parallel("EndedContext", s.testEndedContext)
	parallel("Close", s.testClose)
	parallel("Probe", s.testProbe)
}

// check fails t when h lacks a required part.
func (h Harness) check(t *testing.T) {
	t.Helper()
	var missing []string
	need := func(ok bool, what string) {
		if !ok {
			missing = append(missing, what)
		}
	}
	need(h.Name != "", "Name")
	need(h.New != nil, "New")
	need(h.Topic != nil, "Topic")
	need(h.Read != nil, "Read")
	f := h.Features
	need(!f.PerMessageErrors || h.RejectingTopic != nil, "RejectingTopic (Features.PerMessageErrors)")
	need(!f.Outage || h.Cut != nil, "Cut (Features.Outage)")
	need(!f.Stall || h.Stall != nil, "Stall (Features.Stall)")
	need(!(f.Outage || f.Stall) || h.Heal != nil, "Heal (Features.Outage, Features.Stall)")
	need(f.MaxMessageBytes >= 0, "MaxMessageBytes >= 0")
	if len(missing) > 0 {
		t.Fatalf("publisherstest: the harness lacks %v", missing)
	}
}

type suite struct{ h Harness }

// require skips t, saying why, unless the sink declares the feature.
func (s *suite) require(t *testing.T, has bool, feature, what string) {
	t.Helper()
	if !has {
		t.Skipf("%s declares that it lacks Features.%s (%s): a declared capability, not a skipped check", s.h.Name, feature, what)
	}
}

// publisher returns a fresh publisher, closed at the end of the test.
func (s *suite) publisher(t *testing.T) publishers.Publisher {
	t.Helper()
	p := s.h.New(t)
	if p == nil {
		t.Fatal("Harness.New returned nil")
	}
	t.Cleanup(func() { closeBounded(t, p) })
	return p
}

// closeBounded closes p and fails t when Close takes longer than bound.
func closeBounded(t *testing.T, p publishers.Publisher) {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(bound):
		t.Errorf("Close has not returned after %v", time.Since(start).Round(time.Millisecond))
	}
}

// healOnCleanup heals the broker at the end of the test, whatever
// happened.
func (s *suite) healOnCleanup(t *testing.T) {
	t.Cleanup(s.h.Heal)
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// publish calls Publish and returns one result per message, failing t when
// the result breaks the contract's form: a publishers.Errors of another
// length, or one without a failure, or an error both permanent and
// unavailable.
func publish(t *testing.T, ctx context.Context, p publishers.Publisher, msgs []outbox.Message) []error {
	t.Helper()
	err := p.Publish(ctx, msgs)
	return perMessage(t, err, len(msgs))
}

func perMessage(t *testing.T, err error, n int) []error {
	t.Helper()
	var each publishers.Errors
	if errors.As(err, &each) {
		if len(each) != n {
			t.Fatalf("Publish of %d messages returned a publishers.Errors of length %d: %v", n, len(each), err)
		}
		if !failedAny(each) {
			t.Errorf("Publish returned a publishers.Errors without a failure; it must return nil when every message was acknowledged")
		}
	}
	out := publishers.PerMessage(err, n)
	for i, e := range out {
		if publishers.IsPermanent(e) && errors.Is(e, publishers.ErrUnavailable) {
			t.Errorf("message %d: error is both permanent and unavailable: %v", i, e)
		}
	}
	return out
}

func failedAny(errs []error) bool {
	for _, err := range errs {
		if err != nil {
			return true
		}
	}
	return false
}

// mustPublish publishes msgs and fails t unless every one was acknowledged.
func mustPublish(t *testing.T, p publishers.Publisher, msgs []outbox.Message) {
	t.Helper()
	for i, err := range publish(t, ctxTimeout(t, publishTimeout), p, msgs) {
		if err != nil {
			t.Fatalf("Publish: message %d of %d: %v", i, len(msgs), err)
		}
	}
}

// class names the class of a publish error as the relay sees it.
func class(err error) string {
	switch {
	case err == nil:
		return "acknowledged"
	case publishers.IsPermanent(err):
		return "permanent"
	case errors.Is(err, publishers.ErrUnavailable):
		return "unavailable"
	default:
		return "transient"
	}
}

// msg returns a message with a fresh id; key "" means a nil key.
func msg(topic, key, payload string) outbox.Message {
	m := outbox.Message{ID: uuid.New(), Topic: topic, Payload: []byte(payload), Attempt: 1, CreatedAt: time.Now()}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}

// checkArrived checks that recs hold each of msgs exactly once, intact,
// and nothing else.
func checkArrived(t *testing.T, recs []Record, msgs []outbox.Message) {
	t.Helper()
	byID := index(t, recs)
	for i := range msgs {
		m := &msgs[i]
		r, ok := byID[m.ID.String()]
		if !ok {
			t.Errorf("message %d (event %s, key %q) was acknowledged but did not arrive", i, m.ID, m.Key)
			continue
		}
		delete(byID, m.ID.String())
		checkIntact(t, i, r, m)
	}
	for id, r := range byID {
		t.Errorf("record with event id %q (key %q) arrived but was not published here", id, r.Key)
	}
}

// index maps recs by event id, failing t on a record without one or on a
// duplicate: there are none without faults.
func index(t *testing.T, recs []Record) map[string]Record {
	t.Helper()
	out := make(map[string]Record, len(recs))
	for _, r := range recs {
		if r.EventID == "" {
			t.Errorf("record on %s (key %q) arrived without an event id", r.Topic, r.Key)
			continue
		}
		if _, dup := out[r.EventID]; dup {
			t.Errorf("event %s arrived twice, without any fault", r.EventID)
		}
		out[r.EventID] = r
	}
	return out
}

// checkIntact compares the i-th message m with the record r it became.
func checkIntact(t *testing.T, i int, r Record, m *outbox.Message) {
	t.Helper()
	where := fmt.Sprintf("message %d (event %s)", i, m.ID)
	if r.Topic != m.Topic {
		t.Errorf("%s: arrived at %q, published to %q", where, r.Topic, m.Topic)
	}
	switch {
	case m.Key == nil && r.Key != nil:
		t.Errorf("%s: published without a key, arrived with key %q", where, r.Key)
	case m.Key != nil && !bytes.Equal(r.Key, m.Key):
		t.Errorf("%s: key %q arrived as %q", where, m.Key, r.Key)
	}
	if !bytes.Equal(r.Value, m.Payload) {
		t.Errorf("%s: payload of %d bytes arrived as %d bytes %s", where, len(m.Payload), len(r.Value), diffAt(m.Payload, r.Value))
	}
	got := maps.Clone(r.Headers)
	if v, ok := got[outbox.HeaderEventID]; ok {
		if v != r.EventID {
			t.Errorf("%s: header %s is %q, but the event id read is %q", where, outbox.HeaderEventID, v, r.EventID)
		}
		delete(got, outbox.HeaderEventID)
	}
	if len(got) != len(m.Headers) || !maps.Equal(got, m.Headers) {
		t.Errorf("%s: headers %q arrived as %q", where, m.Headers, got)
	}
}

// diffAt describes where two byte strings first differ.
func diffAt(want, got []byte) string {
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			return fmt.Sprintf("(first difference at byte %d: %#x, want %#x)", i, got[i], want[i])
		}
	}
	return ""
}

// checkKeyOrder checks that each key's records in recs (in Read's order)
// are msgs' messages of that key in their order.
func checkKeyOrder(t *testing.T, recs []Record, msgs []outbox.Message) {
	t.Helper()
	want := map[string][]string{}
	for _, m := range msgs {
		if m.Key != nil {
			want[string(m.Key)] = append(want[string(m.Key)], m.ID.String())
		}
	}
	got := map[string][]string{}
	streams := map[string]map[string]bool{}
	for _, r := range recs {
		if r.Key == nil {
			continue
		}
		k := string(r.Key)
		got[k] = append(got[k], r.EventID)
		if streams[k] == nil {
			streams[k] = map[string]bool{}
		}
		streams[k][r.Stream] = true
	}
	for k, ids := range want {
		if len(streams[k]) > 1 {
			t.Errorf("key %q arrived in %d streams; one key's messages must share one", k, len(streams[k]))
		}
		if !equalStrings(got[k], ids) {
			t.Errorf("key %q: events arrived in the order %v, published in the order %v", k, got[k], ids)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// publishersIsPermanent is publishers.IsPermanent, false for nil.
func publishersIsPermanent(err error) bool { return err != nil && publishers.IsPermanent(err) }
