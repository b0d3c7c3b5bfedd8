package publisherstest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// testKeyBatchesDeclared: the publisher answers publishers.KeyBatcher as the
// harness declares, so that the relay gives several events of one key per
// call only to sinks whose promise this suite checks.
func (s *suite) testKeyBatchesDeclared(t *testing.T) {
	p := s.publisher(t)
	kb, ok := p.(publishers.KeyBatcher)
	says := ok && kb.KeyBatches()
	switch {
	case says && !s.h.Features.KeyBatches:
		t.Errorf("the publisher answers KeyBatches true, but the harness does not declare Features.KeyBatches, so the promise goes unchecked")
	case !says && s.h.Features.KeyBatches:
		t.Errorf("the harness declares Features.KeyBatches, but the publisher does not answer publishers.KeyBatcher's KeyBatches with true")
	}
}

// keyBatchCuts are the delays after which testKeyBatchesUnderCut cuts the
// broker off during a Publish: from before its first request to after its
// last, so that some cuts fall between two requests of one key.
var keyBatchCuts = []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond,
	30 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond}

// testKeyBatchesUnderCut: a batch of several keys' runs is cut off at
// various points; for every key, the messages acknowledged are a prefix of
// its run (up to permanent failures), and what arrived, duplicates aside,
// is a prefix of its run in order that holds every acknowledged message.
// Whatever the timing, a key's later message never arrives without its
// earlier ones, so the relay's retry of the first failure cannot be
// overtaken.
func (s *suite) testKeyBatchesUnderCut(t *testing.T) {
	s.require(t, s.h.Features.KeyBatches, "KeyBatches", "it takes one event per key per call")
	s.require(t, s.h.Features.Outage, "Outage", "its broker cannot be cut off")
	s.healOnCleanup(t)
	partial := 0
	for _, delay := range keyBatchCuts {
		p := s.publisher(t)
		topic := s.h.Topic(t)
		var msgs []outbox.Message
		for i := range 4000 {
			key := fmt.Sprintf("key-%d", i%8)
			msgs = append(msgs, msg(topic, key, fmt.Sprintf(`{"seq":%d,"pad":%q}`, i, strings.Repeat("x", 1000))))
		}
		cut := make(chan struct{})
		timer := time.AfterFunc(delay, func() {
			s.h.Cut()
			close(cut)
		})
		errs := publish(t, ctxTimeout(t, publishTimeout), p, msgs)
		if !timer.Stop() {
			<-cut // heal only once the cut is done
		}
		s.h.Heal()
		if checkKeyPrefixes(t, s.h.Read(t, topic), msgs, errs, s.h.Features.DurableAcks) {
			partial++
		}
	}
	t.Logf("%d of %d cuts fell inside a key's run (acknowledged and failed messages of one key)", partial, len(keyBatchCuts))
}

// checkKeyPrefixes checks, key by key, that the acknowledged messages in
// errs are a prefix of the key's messages in msgs (a permanent failure
// stops nothing) and that recs, the records that arrived, are a prefix of
// them in order, duplicates aside, holding every acknowledged one when
// durable. It reports whether some key had both acknowledged and failed
// messages.
func checkKeyPrefixes(t *testing.T, recs []Record, msgs []outbox.Message, errs []error, durable bool) (partial bool) {
	t.Helper()
	runs := map[string][]int{} // message indexes by key, in order
	for i, m := range msgs {
		if m.Key != nil {
			runs[string(m.Key)] = append(runs[string(m.Key)], i)
		}
	}
	got := map[string][]string{} // event ids by key, in arrival order, first arrivals only
	seen := map[string]bool{}
	for _, r := range recs {
		if r.Key == nil || seen[r.EventID] {
			continue
		}
		seen[r.EventID] = true
		got[string(r.Key)] = append(got[string(r.Key)], r.EventID)
	}
	for key, run := range runs {
		stopped, acked, failed := -1, 0, 0
		for _, i := range run {
			switch err := errs[i]; {
			case err == nil:
				acked++
				if stopped >= 0 {
					t.Errorf("key %q: message %d was acknowledged after message %d failed (%v)", key, i, stopped, errs[stopped])
				}
			case publishersIsPermanent(err):
			default:
				failed++
				if stopped < 0 {
					stopped = i
				}
			}
		}
		partial = partial || acked > 0 && failed > 0
		arrived := got[key]
		if len(arrived) > len(run) {
			t.Errorf("key %q: %d events arrived for %d published", key, len(arrived), len(run))
			continue
		}
		for j, id := range arrived {
			if want := msgs[run[j]].ID.String(); id != want {
				t.Errorf("key %q: arrival %d is event %s, want %s: what arrived is not a prefix of the key's messages", key, j, id, want)
				break
			}
		}
		if durable {
			for _, i := range run {
				if errs[i] == nil && !seen[msgs[i].ID.String()] {
					t.Errorf("key %q: message %d was acknowledged but did not arrive", key, i)
				}
			}
		}
	}
	return partial
}
