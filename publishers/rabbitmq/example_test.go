package rabbitmq_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

func ExamplePublisher_Publish() {
	// The operator's topology: a queue (here declared by hand, on the
	// RabbitMQ on this machine, and deleted when it is no longer used).
	conn, err := amqp.Dial(rabbitmq.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil) // a fresh, exclusive queue
	if err != nil {
		log.Fatal(err)
	}

	p, err := rabbitmq.New(rabbitmq.Config{URL: rabbitmq.DefaultURL})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs := []outbox.Message{
		// A topic without "/" is a queue name, on the default exchange.
		{ID: uuid.New(), Topic: q.Name, Key: []byte("customer-42"), Payload: []byte(`{"order":1}`)},
		// No queue of that name: the broker returns the message.
		{ID: uuid.New(), Topic: "no-such-queue-" + uuid.NewString(), Payload: []byte(`{"order":2}`)},
		// "exchange/routing-key": an exchange that does not exist.
		{ID: uuid.New(), Topic: "no-such-exchange-" + uuid.NewString() + "/orders", Payload: []byte(`{"order":3}`)},
	}
	for i, err := range publishers.PerMessage(p.Publish(ctx, msgs), len(msgs)) {
		switch {
		case err == nil:
			fmt.Printf("message %d: confirmed\n", i)
		case publishers.IsPermanent(err):
			fmt.Printf("message %d: permanent failure\n", i)
		default:
			fmt.Printf("message %d: retry later\n", i)
		}
	}
	d, _, _ := ch.Get(q.Name, true)
	fmt.Printf("%s: key %s, event id header %t\n", d.Body, d.Headers[rabbitmq.HeaderKey], d.Headers[outbox.HeaderEventID] == d.MessageId)
	// Output:
	// message 0: confirmed
	// message 1: permanent failure
	// message 2: permanent failure
	// {"order":1}: key customer-42, event id header true
}
