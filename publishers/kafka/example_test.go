package kafka_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
)

func ExamplePublisher_Publish() {
	// An in-process broker stands in for a Kafka cluster.
	broker, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"orders"}})
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()

	p, err := kafka.New(kafka.Config{Brokers: broker.Addrs()})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs := []outbox.Message{
		{ID: uuid.New(), Topic: "orders", Key: []byte("customer-42"), Payload: []byte(`{"order":1}`)},
		{ID: uuid.New(), Topic: "no-such-topic", Key: []byte("customer-42"), Payload: []byte(`{"order":2}`)},
	}
	for i, err := range publishers.PerMessage(p.Publish(ctx, msgs), len(msgs)) {
		switch {
		case err == nil:
			fmt.Printf("message %d: published\n", i)
		case publishers.IsPermanent(err):
			fmt.Printf("message %d: permanent failure\n", i)
		default:
			fmt.Printf("message %d: retry later\n", i)
		}
	}
	// Output:
	// message 0: published
	// message 1: permanent failure
}
