package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/inbox"
	inboxjs "github.com/outboxrelay/outboxrelay/inbox/jetstream"
)

// natsSource consumes each topic's stream with the durable pull consumer
// consumerName, explicit acks, on a connection of each instance's own
// (to the server directly: the broker faults act on the relays). A
// message is acked once handled; a crash closes the connection, and the
// server delivers the messages fetched and not acked again once
// natsAckWait has passed, to whichever instance fetches first.
type natsSource struct {
	url    string
	topics []string
}

func newNATSSource(s *sink, topics []string) consumerSource {
	return natsSource{url: s.flags.Lookup("nats-url").Value.String(), topics: topics}
}

const (
	// natsAckWait is how long the server waits for an ack before it
	// delivers a message again.
	natsAckWait = 2 * time.Second
	// natsFetch bounds the messages one fetch hands over.
	natsFetch = 100
)

func (n natsSource) instance(ctx context.Context, handle func(context.Context, inbox.Message) bool) error {
	nc, err := nats.Connect(n.url, nats.Name(consumerName))
	if err != nil {
		return fmt.Errorf("nats consumer: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats consumer: %w", err)
	}
	var conss []jetstream.Consumer
	for _, topic := range n.topics {
		stream, err := js.StreamNameBySubject(ctx, topic)
		if err != nil {
			return fmt.Errorf("nats consumer: stream of %s: %w", topic, err)
		}
		cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: consumerName, AckPolicy: jetstream.AckExplicitPolicy, AckWait: natsAckWait,
		})
		if err != nil {
			return fmt.Errorf("nats consumer: consumer of %s: %w", stream, err)
		}
		conss = append(conss, cons)
	}
	for {
		for _, cons := range conss {
			batch, err := cons.Fetch(natsFetch, jetstream.FetchMaxWait(250*time.Millisecond))
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return fmt.Errorf("nats consumer: fetch: %w", err)
			}
			for msg := range batch.Messages() {
				m, _ := inboxjs.Message(msg) // no valid id: a zero one, which Handle refuses
				if !handle(ctx, m) {
					return nil // closed without acking it or the rest of the batch
				}
				if err := msg.Ack(); err != nil {
					return fmt.Errorf("nats consumer: ack: %w", err)
				}
			}
			if err := batch.Error(); err != nil && ctx.Err() == nil {
				return fmt.Errorf("nats consumer: fetch: %w", err)
			}
		}
	}
}
