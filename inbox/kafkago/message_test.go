package kafkago_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/inbox/internal/adaptertest"
	"github.com/outboxrelay/outboxrelay/inbox/kafkago"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
	kafkasink "github.com/outboxrelay/outboxrelay/publishers/kafka"
)

// deliver publishes the adapter test events through the Kafka sink to a
// kfake broker and returns them, and what kafka-go's Reader makes of
// them, converted.
func deliver(t *testing.T) ([]outbox.Message, []inbox.Message) {
	t.Helper()
	const topic = "orders"
	broker, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{topic}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	p, err := kafkasink.New(kafkasink.Config{Brokers: broker.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sent := adaptertest.Events(topic)
	adaptertest.Publish(t, p, sent)

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: broker.Addrs(), Topic: topic, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var got []inbox.Message
	for range sent {
		km, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("ReadMessage: %v", err)
		}
		m, err := kafkago.Message(km)
		if err != nil {
			t.Fatalf("Message: %v", err)
		}
		got = append(got, m)
	}
	return sent, got
}

func TestMessage(t *testing.T) {
	sent, got := deliver(t)
	for i := range sent {
		if len(sent[i].Key) == 0 {
			sent[i].Key = nil // kafka-go's Reader reads an empty key as nil
		}
	}
	adaptertest.Check(t, got, sent, "orders", 0)
}

func TestMessageContextContinuesTheTrace(t *testing.T) {
	_, got := deliver(t)
	sc := trace.SpanContextFromContext(got[0].Context(t.Context()))
	if sc.TraceID().String() != adaptertest.TraceID || !sc.IsRemote() {
		t.Errorf("span context %v (remote %v), want trace %s, remote", sc.TraceID(), sc.IsRemote(), adaptertest.TraceID)
	}
}

func TestMessageWithoutEventID(t *testing.T) {
	for name, headers := range map[string][]kafka.Header{
		"no header":   nil,
		"empty":       {{Key: outbox.HeaderEventID}},
		"not a UUID":  {{Key: outbox.HeaderEventID, Value: []byte("order-1")}},
		"other names": {{Key: "Outbox-Event-Id", Value: []byte("0191e0a4-7a3e-7b1c-8d2e-3f4a5b6c7d8e")}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := kafkago.Message(kafka.Message{Topic: "orders", Headers: headers, Value: []byte("x")})
			if !errors.Is(err, inbox.ErrNoEventID) {
				t.Errorf("error %v, want one wrapping inbox.ErrNoEventID", err)
			}
		})
	}
}
