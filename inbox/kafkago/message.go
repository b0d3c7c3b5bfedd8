package kafkago

import (
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Message returns the inbox message of a record that the relay's Kafka
// sink published, mapped as the package documentation says. The error
// wraps inbox.ErrNoEventID when the record has no valid event id.
func Message(m kafka.Message) (inbox.Message, error) {
	var id string
	headers := make(map[string]string, len(m.Headers))
	for _, h := range m.Headers {
		if h.Key == outbox.HeaderEventID {
			id = string(h.Value)
			continue
		}
		headers[h.Key] = string(h.Value)
	}
	eventID, err := inbox.ParseID(id)
	if err != nil {
		return inbox.Message{}, fmt.Errorf("kafka record %s/%d@%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	return inbox.Message{ID: eventID, Topic: m.Topic, Key: m.Key, Headers: headers, Payload: m.Value}, nil
}
