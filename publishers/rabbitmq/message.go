package rabbitmq

import (
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// HeaderKey is the header that carries a message's key, byte for byte, as
// an AMQP long string. A message without a key (nil) has no such header;
// the empty key has it, empty. The name is reserved: a message header of
// this name is dropped for the real key.
const HeaderKey = "outbox-key"

// toPublishing converts an outbox message to what Publish sends: the
// payload as body; the message's headers as string values, followed by
// HeaderKey (when it has a key) and outbox.HeaderEventID; the event id as
// message_id as well; created_at as timestamp (AMQP keeps whole seconds);
// persistent delivery mode; the content-type header (in any case) as the
// content_type property as well. It fails, naming the header, for a
// header name that an AMQP table cannot carry (empty or longer than 255
// bytes).
func toPublishing(m *outbox.Message) (amqp.Publishing, error) {
	headers := make(amqp.Table, len(m.Headers)+2)
	for name, value := range m.Headers {
		switch {
		case name == outbox.HeaderEventID || name == HeaderKey: // reserved; the real id and key win
			continue
		case name == "":
			return amqp.Publishing{}, fmt.Errorf("%w: a header name is empty", outbox.ErrInvalidHeader)
		case len(name) > maxShortString:
			return amqp.Publishing{}, fmt.Errorf("%w: header name %.40q... is %d bytes, longer than %d", outbox.ErrInvalidHeader, name, len(name), maxShortString)
		}
		headers[name] = value
	}
	id := m.ID.String()
	contentType := ""
	for name, value := range m.Headers {
		if strings.EqualFold(name, "content-type") {
			contentType = value // the event's own content type is the message's
		}
	}
	if m.Key != nil {
		headers[HeaderKey] = string(m.Key)
	}
	headers[outbox.HeaderEventID] = id
	return amqp.Publishing{
		Headers:      headers,
		DeliveryMode: amqp.Persistent,
		MessageId:    id,
		ContentType:  contentType,
		Timestamp:    m.CreatedAt,
		Body:         m.Payload,
	}, nil
}
