package amqp

import (
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

// Message returns the inbox message of a delivery that the relay's
// RabbitMQ sink published, mapped as the package documentation says. The
// error wraps inbox.ErrNoEventID when the delivery has no valid event id.
func Message(d amqp091.Delivery) (inbox.Message, error) {
	id, _ := d.Headers[outbox.HeaderEventID].(string)
	eventID, err := inbox.ParseID(id)
	if err != nil {
		return inbox.Message{}, fmt.Errorf("amqp delivery %d from %q: %w", d.DeliveryTag, d.RoutingKey, err)
	}
	var key []byte
	if v, ok := d.Headers[rabbitmq.HeaderKey]; ok {
		s, ok := v.(string)
		if !ok {
			return inbox.Message{}, fmt.Errorf("amqp delivery %d from %q: header %s is a %T, not a string", d.DeliveryTag, d.RoutingKey, rabbitmq.HeaderKey, v)
		}
		key = []byte(s)
	}
	headers := make(map[string]string, len(d.Headers))
	for name, v := range d.Headers {
		if s, ok := v.(string); ok && name != outbox.HeaderEventID && name != rabbitmq.HeaderKey {
			headers[name] = s
		}
	}
	var createdAt time.Time
	if !d.Timestamp.IsZero() {
		createdAt = d.Timestamp.UTC()
	}
	return inbox.Message{ID: eventID, Topic: d.RoutingKey, Key: key, CreatedAt: createdAt, Headers: headers, Payload: d.Body}, nil
}
