package publisherstest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// testPerMessageErrors: in a batch mixing messages the sink takes with
// messages it refuses, each refusal is reported on its own message, as
// permanent, and the others are acknowledged and arrive.
func (s *suite) testPerMessageErrors(t *testing.T) {
	s.require(t, s.h.Features.PerMessageErrors, "PerMessageErrors", "it cannot refuse one message of a batch and take the others")
	p := s.publisher(t)
	good, bad := s.h.Topic(t), s.h.RejectingTopic(t)
	var msgs, accepted []outbox.Message
	refused := map[int]bool{}
	for i := range 9 {
		topic := good
		if i%3 == 1 {
			topic = bad
			refused[i] = true
		}
		msgs = append(msgs, msg(topic, fmt.Sprintf("k%d", i%2), fmt.Sprintf("message %d", i)))
		if !refused[i] {
			accepted = append(accepted, msgs[i])
		}
	}
	errs := publish(t, ctxTimeout(t, publishTimeout), p, msgs)
	for i, err := range errs {
		want := "acknowledged"
		if refused[i] {
			want = "permanent"
		}
		if got := class(err); got != want {
			t.Errorf("message %d (topic %s): %s (%v), want %s", i, msgs[i].Topic, got, err, want)
		}
	}
	checkArrived(t, s.h.Read(t, good), accepted)
}

// testAllRejected: a batch the sink refuses whole is refused permanently,
// for every message.
func (s *suite) testAllRejected(t *testing.T) {
	s.require(t, s.h.Features.PerMessageErrors, "PerMessageErrors", "it never refuses a message")
	p := s.publisher(t)
	bad := s.h.RejectingTopic(t)
	msgs := []outbox.Message{msg(bad, "a", "1"), msg(bad, "b", "2"), msg(bad, "", "3")}
	for i, err := range publish(t, ctxTimeout(t, publishTimeout), p, msgs) {
		if got := class(err); got != "permanent" {
			t.Errorf("message %d: %s (%v), want permanent", i, got, err)
		}
	}
}

// testTooLarge: a message over the sink's size limit fails permanently,
// alone; the rest of its batch arrives.
func (s *suite) testTooLarge(t *testing.T) {
	limit := s.h.Features.MaxMessageBytes
	s.require(t, limit > 0, "MaxMessageBytes", "it has no message size limit")
	p := s.publisher(t)
	topic := s.h.Topic(t)
	huge := msg(topic, "big", "")
	huge.Payload = bytes.Repeat([]byte{'x'}, limit+1)
	fits := msg(topic, "small-2", "fits")
	msgs := []outbox.Message{msg(topic, "small-1", "fits"), huge, fits, msg(topic, "", "fits too")}
	errs := publish(t, ctxTimeout(t, publishTimeout), p, msgs)
	for i, err := range errs {
		want := "acknowledged"
		if i == 1 {
			want = "permanent"
		}
		if got := class(err); got != want {
			t.Errorf("message %d (%d bytes of payload, limit %d): %s (%v), want %s", i, len(msgs[i].Payload), limit, got, err, want)
		}
	}
	checkArrived(t, s.h.Read(t, topic), []outbox.Message{msgs[0], msgs[2], msgs[3]})
}
