package bench

import (
	"context"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// rabbitCeiling publishes as publishers/rabbitmq does: persistent,
// mandatory, the same headers and message id, on a channel in confirm
// mode, every confirm awaited. A topic is a routing key on the default
// exchange: the queue the reader declared.
type rabbitCeiling struct {
	conn *amqp.Connection

	mu   sync.Mutex
	pubs []*amqp.Channel // confirm-mode channels not in use
}

// rabbitHeaderKey is publishers/rabbitmq's HeaderKey.
const rabbitHeaderKey = "outbox-key"

func openRabbitMQCeiling(_ context.Context, url string) (ceiling, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "relay-bench"}})
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: cannot reach %s (start rabbitmq-server, or pass --sink-url): %w", redactURL(url), err)
	}
	return &rabbitCeiling{conn: conn}, nil
}

// channel returns an idle confirm-mode channel, or a new one.
func (r *rabbitCeiling) channel() (*amqp.Channel, error) {
	r.mu.Lock()
	if n := len(r.pubs); n > 0 {
		ch := r.pubs[n-1]
		r.pubs = r.pubs[:n-1]
		r.mu.Unlock()
		return ch, nil
	}
	r.mu.Unlock()
	ch, err := r.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("rabbitmq: confirm mode: %w", err)
	}
	return ch, nil
}

func (r *rabbitCeiling) publish(ctx context.Context, topic string, msgs []outbox.Message) error {
	ch, err := r.channel()
	if err != nil {
		return err
	}
	confirms := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		id := m.ID.String()
		dc, err := ch.PublishWithDeferredConfirm("", topic, true, false, amqp.Publishing{
			Headers:      amqp.Table{rabbitHeaderKey: string(m.Key), outbox.HeaderEventID: id},
			DeliveryMode: amqp.Persistent,
			MessageId:    id,
			Timestamp:    m.CreatedAt,
			Body:         m.Payload,
		})
		if err != nil {
			ch.Close()
			return fmt.Errorf("rabbitmq: publish: %w", err)
		}
		confirms = append(confirms, dc)
	}
	nacked := 0
	for _, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			ch.Close()
			return fmt.Errorf("rabbitmq: confirm: %w", err)
		}
		if !ok {
			nacked++
		}
	}
	r.mu.Lock()
	r.pubs = append(r.pubs, ch)
	r.mu.Unlock()
	if nacked > 0 {
		return fmt.Errorf("rabbitmq: %d messages nacked", nacked)
	}
	return nil
}

func (r *rabbitCeiling) close() error { return r.conn.Close() }
