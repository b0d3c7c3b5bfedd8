package publisherstest

import (
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// testOutage: while the broker is cut off, Publish reports every message
// unavailable (never permanent: the relay must not spend or fail rows on
// an outage) and Probe fails; once it is back, Probe and then Publish
// succeed at their first call, on the same publisher.
func (s *suite) testOutage(t *testing.T) {
	s.require(t, s.h.Features.Outage, "Outage", "its broker cannot be cut off")
	p := s.publisher(t)
	topic := s.h.Topic(t)
	before := []outbox.Message{msg(topic, "k", "before the outage")}
	mustPublish(t, p, before) // pooled connections that the cut will break

	s.healOnCleanup(t)
	s.h.Cut()
	down := []outbox.Message{msg(topic, "k", "during 1"), msg(topic, "j", "during 2"), msg(topic, "", "during 3")}
	start := time.Now()
	errs := publish(t, ctxTimeout(t, publishTimeout), p, down)
	took := time.Since(start)
	for i, err := range errs {
		if got := class(err); got != "unavailable" {
			t.Errorf("Publish during the outage: message %d: %s (%v), want unavailable", i, got, err)
		}
	}
	t.Logf("Publish during the outage returned after %v: %v", took.Round(time.Millisecond), errs[0])
	if s.h.Features.Prober {
		pr := s.prober(t, p)
		if err := pr.Probe(ctxTimeout(t, publishTimeout)); class(err) != "unavailable" {
			t.Errorf("Probe during the outage = %v (%s), want unavailable", err, class(err))
		}
	}

	s.h.Heal()
	if s.h.Features.Prober {
		if err := s.prober(t, p).Probe(ctxTimeout(t, publishTimeout)); err != nil {
			t.Errorf("first Probe after the broker came back: %v", err)
		}
	}
	after := []outbox.Message{msg(topic, "k", "after 1"), msg(topic, "j", "after 2")}
	for i, err := range publish(t, ctxTimeout(t, publishTimeout), p, after) {
		if err != nil {
			t.Errorf("first Publish after the broker came back: message %d: %v", i, err)
		}
	}
	recs := s.h.Read(t, topic)
	byID := index(t, recs)
	for _, m := range down {
		delete(byID, m.ID.String()) // unknown outcome at worst; never reported acknowledged
	}
	filtered := make([]Record, 0, len(byID))
	for _, r := range recs {
		if _, ok := byID[r.EventID]; ok {
			filtered = append(filtered, r)
		}
	}
	checkArrived(t, filtered, append(before, after...))
}
