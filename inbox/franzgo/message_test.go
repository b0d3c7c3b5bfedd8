package franzgo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/inbox/franzgo"
	"github.com/outboxrelay/outboxrelay/inbox/internal/adaptertest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
	kafkasink "github.com/outboxrelay/outboxrelay/publishers/kafka"
)

func TestMessage(t *testing.T) {
	const topic = "orders"
	broker, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	p, err := kafkasink.New(kafkasink.Config{Brokers: broker.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sent := adaptertest.Events(topic)
	adaptertest.Publish(t, p, sent)

	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var got []inbox.Message
	for len(got) < len(sent) {
		fetches := cl.PollFetches(ctx)
		if err := fetches.Err(); err != nil {
			t.Fatalf("PollFetches: %v", err)
		}
		for _, r := range fetches.Records() {
			m, err := franzgo.Message(r)
			if err != nil {
				t.Fatalf("Message: %v", err)
			}
			got = append(got, m)
		}
	}
	adaptertest.Check(t, got, sent, topic, 0)
}

func TestMessageWithoutEventID(t *testing.T) {
	for name, headers := range map[string][]kgo.RecordHeader{
		"no header":   nil,
		"empty":       {{Key: outbox.HeaderEventID}},
		"not a UUID":  {{Key: outbox.HeaderEventID, Value: []byte("order-1")}},
		"other names": {{Key: "Outbox-Event-Id", Value: []byte("0191e0a4-7a3e-7b1c-8d2e-3f4a5b6c7d8e")}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := franzgo.Message(&kgo.Record{Topic: "orders", Headers: headers, Value: []byte("x")})
			if !errors.Is(err, inbox.ErrNoEventID) {
				t.Errorf("error %v, want one wrapping inbox.ErrNoEventID", err)
			}
		})
	}
}
