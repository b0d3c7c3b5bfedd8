package franzgo

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Message returns the inbox message of a record that the relay's Kafka
// sink published, mapped as the package documentation says. The error
// wraps inbox.ErrNoEventID when the record has no valid event id.
func Message(r *kgo.Record) (inbox.Message, error) {
	var id string
	headers := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		if h.Key == outbox.HeaderEventID {
			id = string(h.Value)
			continue
		}
		headers[h.Key] = string(h.Value)
	}
	eventID, err := inbox.ParseID(id)
	if err != nil {
		return inbox.Message{}, fmt.Errorf("kafka record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return inbox.Message{ID: eventID, Topic: r.Topic, Key: r.Key, Headers: headers, Payload: r.Value}, nil
}
