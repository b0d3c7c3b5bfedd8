package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/outbox"
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
				if !handle(ctx, natsMessage(msg)) {
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

// natsMessage is msg as the inbox sees it; an id that does not parse
// leaves ID zero, which Handle refuses with inbox.ErrNoEventID.
func natsMessage(msg jetstream.Msg) inbox.Message {
	m := inbox.Message{Topic: msg.Subject(), Payload: msg.Data(), Headers: map[string]string{}}
	for k, v := range msg.Headers() {
		if len(v) > 0 {
			m.Headers[k] = v[0]
		}
	}
	if meta, err := msg.Metadata(); err == nil {
		m.CreatedAt = meta.Timestamp
	}
	m.ID, _ = inbox.ParseID(msg.Headers().Get(outbox.HeaderEventID))
	return m
}
