package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// rabbitSink is the RabbitMQ sink: each run's topic is a routing key on
// the default exchange, so a durable queue named after the topic receives
// the events (publishers/rabbitmq's mapping of a topic without "/"), read
// back by a consumer in no-ack mode. The ceiling publishes as
// publishers/rabbitmq does: persistent, mandatory, the same headers and
// message id, on a channel in confirm mode, every confirm awaited.
type rabbitSink struct {
	url  string
	conn *amqp.Connection

	mu   sync.Mutex
	pubs []*amqp.Channel // confirm-mode channels not in use
}

// rabbitHeaderKey is publishers/rabbitmq's HeaderKey.
const rabbitHeaderKey = "outbox-key"

func openRabbitMQ(_ context.Context, url string) (*rabbitSink, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "relay-bench"}})
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: cannot reach %s (start rabbitmq-server, or pass --sink-url): %w", redactURL(url), err)
	}
	return &rabbitSink{url: url, conn: conn}, nil
}

func (r *rabbitSink) relayArgs() []string { return []string{"--sink", "rabbitmq"} }
func (r *rabbitSink) relayEnv() []string  { return []string{"OUTBOX_RABBITMQ_URL=" + r.url} }

// withChannel runs fn on a channel of its own, closed after.
func (r *rabbitSink) withChannel(fn func(*amqp.Channel) error) error {
	ch, err := r.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: channel: %w", err)
	}
	defer ch.Close()
	return fn(ch)
}

func (r *rabbitSink) prepare(_ context.Context, topic string) error {
	return r.withChannel(func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(topic, true, false, false, false, nil); err != nil {
			return fmt.Errorf("rabbitmq: declare queue %s: %w", topic, err)
		}
		return nil
	})
}

func (r *rabbitSink) cleanup(_ context.Context, topic string) error {
	return r.withChannel(func(ch *amqp.Channel) error {
		if _, err := ch.QueueDelete(topic, false, false, false); err != nil {
			return fmt.Errorf("rabbitmq: delete queue %s: %w", topic, err)
		}
		return nil
	})
}

// rabbitConsumerTag is the read-back consumer's tag.
const rabbitConsumerTag = "relay-bench"

// rabbitReadIdle bounds a read-back that makes no progress.
const rabbitReadIdle = 10 * time.Second

func (r *rabbitSink) read(ctx context.Context, topic string, follow bool, a *arrivals, ready func()) error {
	return r.withChannel(func(ch *amqp.Channel) error {
		want := 0
		if !follow {
			q, err := ch.QueueDeclarePassive(topic, true, false, false, false, nil)
			if err != nil {
				return fmt.Errorf("rabbitmq: queue %s: %w", topic, err)
			}
			if want = q.Messages; want == 0 {
				return nil
			}
		}
		if err := ch.Qos(1000, 0, false); err != nil {
			return fmt.Errorf("rabbitmq: qos: %w", err)
		}
		// Consume, not ConsumeWithContext: a channel closed after the
		// context ended the consumer did not get its close-ok (amqp091-go
		// 1.16). The consumer is cancelled here, and what is still
		// coming drained, before withChannel closes the channel.
		deliveries, err := ch.Consume(topic, rabbitConsumerTag, true, true, false, false, nil)
		if err != nil {
			return fmt.Errorf("rabbitmq: consume %s: %w", topic, err)
		}
		defer func() {
			go func() {
				for range deliveries { //nolint:revive // draining until the channel closes
				}
			}()
			_ = ch.Cancel(rabbitConsumerTag, false)
		}()
		if ready != nil {
			ready()
		}
		idle := time.NewTimer(rabbitReadIdle)
		defer idle.Stop()
		got := 0
		for follow || got < want {
			select {
			case d, ok := <-deliveries:
				if !ok {
					if follow && ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("rabbitmq: consumer of %s closed after %d messages", topic, got)
				}
				at := time.Now()
				id, _ := uuid.Parse(d.MessageId)
				a.add([]uuid.UUID{id}, at)
				got++
				if !follow {
					idle.Reset(rabbitReadIdle)
				}
			case <-idle.C:
				if !follow {
					return fmt.Errorf("rabbitmq: read %d of the %d messages of %s, then nothing for %v", got, want, topic, rabbitReadIdle)
				}
			case <-ctx.Done():
				if follow {
					return nil
				}
				return ctx.Err()
			}
		}
		return nil
	})
}

// channel returns an idle confirm-mode channel, or a new one.
func (r *rabbitSink) channel() (*amqp.Channel, error) {
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

func (r *rabbitSink) publish(ctx context.Context, topic string, msgs []outbox.Message) error {
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

func (r *rabbitSink) settings(s *Settings) { s.Sink, s.SinkURL = SinkRabbitMQ, redactURL(r.url) }

func (r *rabbitSink) close() error { return r.conn.Close() }

var _ ceilingSink = (*rabbitSink)(nil)
