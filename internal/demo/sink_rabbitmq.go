package demo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

// RabbitMQConfig is how the demo reaches RabbitMQ: the RabbitMQ sink's URL
// and exchange.
type RabbitMQConfig struct {
	// URL is amqp://user:password@host:port/vhost. Defaults to
	// rabbitmq.DefaultURL.
	URL string
	// Exchange is the sink's exchange for topics without "/". Defaults to
	// "", the default exchange.
	Exchange string
}

// RabbitMQ is the demo's RabbitMQ: Open declares a queue where the sink
// routes the topic (rabbitmq.ParseDestination) and consumes it. The queue
// is exclusive: the broker deletes it when the demo disconnects, even
// after a crash.
type RabbitMQ struct {
	cfg             RabbitMQConfig
	conn            *amqp.Connection
	ch              *amqp.Channel
	createdExchange string
	wg              sync.WaitGroup
}

// NewRabbitMQ returns the demo's RabbitMQ; it connects in Open.
func NewRabbitMQ(cfg RabbitMQConfig) *RabbitMQ {
	if cfg.URL == "" {
		cfg.URL = rabbitmq.DefaultURL
	}
	return &RabbitMQ{cfg: cfg}
}

// Open declares the destination the sink maps topic to: on the default
// exchange, the queue the routing key names; on another exchange (which
// it declares, as a topic exchange, when it is missing, and deletes at
// Close), a queue of the broker's naming bound with the routing key. It
// then consumes the queue.
func (r *RabbitMQ) Open(ctx context.Context, topic string, got func(Received)) (string, error) {
	dest, err := rabbitmq.ParseDestination(topic, r.cfg.Exchange)
	if err != nil {
		return "", err
	}
	conn, err := amqp.Dial(r.cfg.URL)
	if err != nil {
		return "", fmt.Errorf("cannot reach RabbitMQ (start rabbitmq-server, or pass --rabbitmq-url): %w", err)
	}
	r.conn = conn
	if dest.Exchange != "" {
		if err := r.ensureExchange(dest.Exchange); err != nil {
			return "", err
		}
	}
	if r.ch, err = conn.Channel(); err != nil {
		return "", fmt.Errorf("rabbitmq: channel: %w", err)
	}
	queue := ""
	if dest.Exchange == "" {
		queue = dest.RoutingKey
	}
	q, err := r.ch.QueueDeclare(queue, false, true, true, false, nil) // not durable, auto-delete, exclusive
	if err != nil {
		return "", fmt.Errorf("rabbitmq: declare queue %q: %w", queue, err)
	}
	where := fmt.Sprintf("queue %s on the default exchange", q.Name)
	if dest.Exchange != "" {
		if err := r.ch.QueueBind(q.Name, dest.RoutingKey, dest.Exchange, false, nil); err != nil {
			return "", fmt.Errorf("rabbitmq: bind queue %s to exchange %s with routing key %s: %w", q.Name, dest.Exchange, dest.RoutingKey, err)
		}
		where = fmt.Sprintf("queue %s bound to exchange %s with routing key %s", q.Name, dest.Exchange, dest.RoutingKey)
	}
	// Consume, not ConsumeWithContext: amqp091-go v1.16 cancels a
	// consumer whose context ended from a goroutine of its own, and a
	// channel or connection closed meanwhile then waits forever (Close hung
	// the demo for 10 minutes in CI). The consumer ends with the connection.
	deliveries, err := r.ch.Consume(q.Name, "outboxrelay-demo", true, true, false, false, nil) // auto-ack, exclusive
	if err != nil {
		return "", fmt.Errorf("rabbitmq: consume queue %s: %w", q.Name, err)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for d := range deliveries { // ends when the channel closes
			id, _ := d.Headers[outbox.HeaderEventID].(string)
			key, _ := d.Headers[rabbitmq.HeaderKey].(string)
			got(Received{EventID: id, Key: key, Payload: string(d.Body)})
		}
	}()
	return fmt.Sprintf("rabbitmq: %s, topic %s to %s", conn.RemoteAddr(), topic, where), nil
}

// ensureExchange declares exchange as a topic exchange unless it exists.
// A passive declare of a missing exchange closes its channel: it gets one
// of its own.
func (r *RabbitMQ) ensureExchange(exchange string) error {
	ch, err := r.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: channel: %w", err)
	}
	err = ch.ExchangeDeclarePassive(exchange, amqp.ExchangeTopic, false, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case err == nil:
		return ch.Close()
	case !errors.As(err, &ae) || ae.Code != amqp.NotFound:
		return fmt.Errorf("rabbitmq: exchange %s: %w", exchange, err)
	}
	if ch, err = r.conn.Channel(); err != nil {
		return fmt.Errorf("rabbitmq: channel: %w", err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, false, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare exchange %s: %w", exchange, err)
	}
	r.createdExchange = exchange
	return nil
}

// closeTimeout bounds closing the connection.
const closeTimeout = 2 * time.Second

// Close stops consuming, deletes the exchange Open declared, and
// disconnects, which deletes the queue.
func (r *RabbitMQ) Close() error {
	if r.conn == nil {
		return nil
	}
	var err error
	if r.createdExchange != "" {
		if ch, cerr := r.conn.Channel(); cerr == nil {
			err = ch.ExchangeDelete(r.createdExchange, false, false)
			_ = ch.Close()
		}
	}
	// Closing the connection closes the channel and ends the consumer;
	// the deadline bounds the close handshake with a broker that does
	// not answer.
	err = errors.Join(err, r.conn.CloseDeadline(time.Now().Add(closeTimeout)))
	r.wg.Wait()
	return err
}
