package amqp_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/inbox/amqp"
	"github.com/outboxrelay/outboxrelay/inbox/internal/adaptertest"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

// brokerURL is the broker the tests use: $OUTBOX_TEST_RABBITMQ_URL, or
// RabbitMQ's defaults on this machine.
func brokerURL() string {
	if u := os.Getenv("OUTBOX_TEST_RABBITMQ_URL"); u != "" {
		return u
	}
	return rabbitmq.DefaultURL
}

func TestMessage(t *testing.T) {
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		t.Fatalf("no RabbitMQ at %s: %v", brokerURL(), err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := "outboxrelay-test-inbox-" + uuid.NewString()[:13]
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp091.Table{"x-expires": int32(10 * 60 * 1000)}); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = ch.QueueDelete(queue, false, false, false) }()

	p, err := rabbitmq.New(rabbitmq.Config{URL: brokerURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sent := adaptertest.Events(queue) // the default exchange: the topic is the queue
	adaptertest.Publish(t, p, sent)

	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var got []inbox.Message
	for range sent {
		select {
		case d := <-deliveries:
			m, err := amqp.Message(d)
			if err != nil {
				t.Fatalf("Message: %v", err)
			}
			got = append(got, m)
		case <-ctx.Done():
			t.Fatalf("%d of %d messages delivered", len(got), len(sent))
		}
	}
	adaptertest.Check(t, got, sent, queue, time.Second)
}

func TestMessageWithoutEventID(t *testing.T) {
	for name, h := range map[string]amqp091.Table{
		"no header":  nil,
		"not a UUID": {outbox.HeaderEventID: "order-1"},
		"not text":   {outbox.HeaderEventID: []byte(uuid.NewString())},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := amqp.Message(amqp091.Delivery{RoutingKey: "orders", Headers: h, MessageId: uuid.NewString(), Body: []byte("x")})
			if !errors.Is(err, inbox.ErrNoEventID) {
				t.Errorf("error %v, want one wrapping inbox.ErrNoEventID", err)
			}
		})
	}
}
