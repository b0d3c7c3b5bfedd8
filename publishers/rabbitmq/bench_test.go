package rabbitmq_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

// benchMessages is the batch both benchmarks publish: 10,000 messages of
// 200 bytes, over 100 keys, to one durable queue.
const benchMessages = 10_000

// benchBatch returns benchMessages messages for queue.
func benchBatch(queue string) []outbox.Message {
	payload := bytes.Repeat([]byte("x"), 200)
	msgs := make([]outbox.Message, benchMessages)
	for i := range msgs {
		msgs[i] = outbox.Message{ID: uuid.New(), Topic: queue, Key: fmt.Appendf(nil, "key-%d", i%100), Payload: payload, CreatedAt: time.Now()}
	}
	return msgs
}

// benchQueue declares the benchmark's queue, durable or not, which the
// broker itself keeps from growing (it keeps the newest messages only).
// The confirm of a persistent message on a durable queue waits for the
// disk; on a transient queue it does not, which leaves the client's own
// costs to measure.
func benchQueue(b *testing.B, durable bool) string {
	br := newBroker(b)
	args := amqp.Table{"x-max-length": int32(benchMessages)}
	if durable {
		return br.queue(b, args)
	}
	q := name("bench")
	br.do(b, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(q, false, true, false, false, args)
		return err
	})
	b.Cleanup(func() {
		br.cleanup(func(ch *amqp.Channel) error { _, err := ch.QueueDelete(q, false, false, false); return err })
	})
	return q
}

// queueKinds runs f as a sub-benchmark for a durable and a transient
// queue.
func queueKinds(b *testing.B, f func(b *testing.B, queue string)) {
	for _, durable := range []bool{true, false} {
		kind := map[bool]string{true: "durable", false: "transient"}[durable]
		b.Run(kind, func(b *testing.B) { f(b, benchQueue(b, durable)) })
	}
}

// BenchmarkPublish is the sink's Publish of 10,000 200-byte messages, to
// be compared with BenchmarkBareClient, its ceiling.
func BenchmarkPublish(b *testing.B) { queueKinds(b, benchPublish) }

func benchPublish(b *testing.B, q string) {
	p := newPublisher(b, rabbitmq.Config{})
	msgs := benchBatch(q)
	b.SetBytes(200 * benchMessages)
	b.ResetTimer()
	for b.Loop() {
		if err := p.Publish(b.Context(), msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(benchMessages*b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkBareClient publishes the same messages with amqp091-go alone:
// one channel in confirm mode, mandatory and persistent, every message
// sent with a deferred confirmation before any is awaited.
func BenchmarkBareClient(b *testing.B) { queueKinds(b, benchBareClient) }

func benchBareClient(b *testing.B, q string) {
	conn := admin(b)
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	msgs := benchBatch(q)
	pubs := make([]amqp.Publishing, len(msgs))
	for i, m := range msgs {
		pubs[i] = amqp.Publishing{
			Headers:      amqp.Table{rabbitmq.HeaderKey: string(m.Key), outbox.HeaderEventID: m.ID.String()},
			DeliveryMode: amqp.Persistent, MessageId: m.ID.String(), Timestamp: m.CreatedAt, Body: m.Payload,
		}
	}
	dcs := make([]*amqp.DeferredConfirmation, len(pubs))
	b.SetBytes(200 * benchMessages)
	b.ResetTimer()
	for b.Loop() {
		for i := range pubs {
			if dcs[i], err = ch.PublishWithDeferredConfirm("", q, true, false, pubs[i]); err != nil {
				b.Fatal(err)
			}
		}
		for _, dc := range dcs {
			if ok, err := dc.WaitContext(b.Context()); !ok || err != nil {
				b.Fatalf("not confirmed: %v", err)
			}
		}
	}
	b.ReportMetric(float64(benchMessages*b.N)/b.Elapsed().Seconds(), "msgs/s")
}
