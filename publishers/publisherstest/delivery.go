package publisherstest

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// testEmpty: a Publish of no message succeeds and sends nothing.
func (s *suite) testEmpty(t *testing.T) {
	p := s.publisher(t)
	topic := s.h.Topic(t)
	for _, msgs := range [][]outbox.Message{nil, {}} {
		if err := p.Publish(ctxTimeout(t, publishTimeout), msgs); err != nil {
			t.Errorf("Publish(%#v) = %v, want nil", msgs, err)
		}
	}
	if recs := s.h.Read(t, topic); len(recs) != 0 {
		t.Errorf("an empty Publish made %d records arrive", len(recs))
	}
}

// testAcknowledgedIsDurable: what Publish acknowledged is stored by the
// broker when Publish returns, for a reader that is not the publisher.
// With Features.Outage the broker is cut off the moment Publish returns,
// so that nothing the publisher might still send afterwards gets through.
func (s *suite) testAcknowledgedIsDurable(t *testing.T) {
	s.require(t, s.h.Features.DurableAcks, "DurableAcks", "its acknowledgement is not a broker's")
	p := s.publisher(t)
	topic := s.h.Topic(t)
	var msgs []outbox.Message
	for i := range 20 {
		msgs = append(msgs, msg(topic, fmt.Sprintf("k%d", i%4), fmt.Sprintf("durable %d", i)))
	}
	mustPublish(t, p, msgs[:1]) // connections in place
	if s.h.Features.Outage {
		s.healOnCleanup(t)
		mustPublish(t, p, msgs[1:])
		s.h.Cut()
		s.h.Heal()
	} else {
		mustPublish(t, p, msgs[1:])
	}
	// Read at once, while the publisher is still open: nothing it holds
	// may be needed to complete what it acknowledged.
	checkArrived(t, s.h.Read(t, topic), msgs)
	// Nor may it add anything once closed.
	closeBounded(t, p)
	checkArrived(t, s.h.Read(t, topic), msgs)
}

// testIntact: key, payload bytes, headers and the event id arrive as
// published, for text and binary content.
func (s *suite) testIntact(t *testing.T) {
	p := s.publisher(t)
	topic := s.h.Topic(t)
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	msgs := []outbox.Message{
		msg(topic, "order-1", `{"id":1,"note":"<&>"}`),
		msg(topic, "", "no key"),
		msg(topic, "order-2", ""),
		{Topic: topic, Key: []byte{0, 0xff, 0xfe, '\n', 0x80}, Payload: binary},
		{Topic: topic, Key: []byte("héllo\u2028"), Payload: []byte("line one\nline two\r\n\x00\x1b[31m")},
		{Topic: topic, Key: []byte("order-1"), Payload: []byte("with headers"), Headers: map[string]string{
			"content-type": "application/json", "trace-id": "00-abc-01", "unicode": "ünïcødé ✓", "empty": "",
		}},
		{Topic: topic, Payload: []byte(strings.Repeat("0123456789", 6000))}, // 60 kB
	}
	for i := range msgs {
		if msgs[i].ID == uuid.Nil {
			msgs[i].ID = uuid.New()
		}
	}
	mustPublish(t, p, msgs)
	checkArrived(t, s.h.Read(t, topic), msgs)
}

// testKeyOrder: the messages of one key in one Publish arrive in order,
// interleaved with other keys' and unkeyed messages.
func (s *suite) testKeyOrder(t *testing.T) {
	s.require(t, s.h.Features.KeyOrder, "KeyOrder", "it does not keep one key's messages in order")
	p := s.publisher(t)
	topic := s.h.Topic(t)
	var msgs []outbox.Message
	for i := range 300 {
		key := fmt.Sprintf("customer-%d", i%7)
		if i%11 == 0 {
			key = ""
		}
		msgs = append(msgs, msg(topic, key, fmt.Sprintf("event %d of %s", i, key)))
	}
	mustPublish(t, p, msgs)
	recs := s.h.Read(t, topic)
	checkArrived(t, recs, msgs)
	checkKeyOrder(t, recs, msgs)
}

// testLargeBatch: a batch far larger than any one request of the sink
// arrives whole, intact and, with KeyOrder, in order.
func (s *suite) testLargeBatch(t *testing.T) {
	p := s.publisher(t)
	topic := s.h.Topic(t)
	const n = 5000
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = msg(topic, fmt.Sprintf("key-%d", i%50), fmt.Sprintf(`{"seq":%d,"pad":%q}`, i, strings.Repeat("x", i%300)))
	}
	mustPublish(t, p, msgs)
	recs := s.h.Read(t, topic)
	if len(recs) != n {
		t.Errorf("%d records arrived for %d acknowledged messages", len(recs), n)
	}
	checkArrived(t, recs, msgs)
	if s.h.Features.KeyOrder {
		checkKeyOrder(t, recs, msgs)
	}
}

// testConcurrent: one publisher takes Publish calls from several
// goroutines at once, as the relay's workers make them.
func (s *suite) testConcurrent(t *testing.T) {
	p := s.publisher(t)
	topic := s.h.Topic(t)
	const callers, each = 8, 50
	batches := make([][]outbox.Message, callers)
	var all []outbox.Message
	for c := range batches {
		for i := range each {
			batches[c] = append(batches[c], msg(topic, fmt.Sprintf("caller-%d", c), fmt.Sprintf("caller %d event %d", c, i)))
		}
		all = append(all, batches[c]...)
	}
	results := make([]error, callers)
	ctx := ctxTimeout(t, publishTimeout)
	var wg sync.WaitGroup
	for c := range batches {
		wg.Go(func() { results[c] = p.Publish(ctx, batches[c]) })
	}
	wg.Wait()
	for c, err := range results {
		if err != nil {
			t.Errorf("Publish of caller %d: %v", c, err)
		}
	}
	recs := s.h.Read(t, topic)
	checkArrived(t, recs, all)
	if s.h.Features.KeyOrder {
		checkKeyOrder(t, recs, all)
	}
}
