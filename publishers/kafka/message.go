package kafka

import (
	"slices"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// toKafka converts an outbox message to the record Publish sends: the
// outbox key (nil stays nil), the payload as value, the outbox headers
// sorted by name, then the event id header.
func toKafka(m *outbox.Message) kafkago.Message {
	names := make([]string, 0, len(m.Headers))
	for name := range m.Headers {
		if name != outbox.HeaderEventID { // reserved; the real id wins
			names = append(names, name)
		}
	}
	slices.Sort(names)
	headers := make([]kafkago.Header, 0, len(names)+1)
	for _, name := range names {
		headers = append(headers, kafkago.Header{Key: name, Value: []byte(m.Headers[name])})
	}
	headers = append(headers, kafkago.Header{Key: outbox.HeaderEventID, Value: []byte(m.ID.String())})
	return kafkago.Message{
		Topic:   m.Topic,
		Key:     m.Key,
		Value:   m.Payload,
		Headers: headers,
	}
}

// eventID returns the event id header of a message built by toKafka.
func eventID(m *kafkago.Message) string {
	if n := len(m.Headers); n > 0 && m.Headers[n-1].Key == outbox.HeaderEventID {
		return string(m.Headers[n-1].Value)
	}
	return ""
}

// messageSize is the size kafka-go's Writer attributes to m when it checks
// BatchBytes: the legacy message overhead (CRC, magic, attributes,
// timestamp, two length prefixes) plus key, value and varint-encoded
// headers.
func messageSize(m *kafkago.Message) int {
	size := 4 + 1 + 1 + 8 + 4 + len(m.Key) + 4 + len(m.Value)
	size += varintLen(len(m.Headers))
	for _, h := range m.Headers {
		size += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	return size
}

// varintLen is the length of n as a zig-zag varint.
func varintLen(n int) int {
	u := uint64(n) << 1 // n >= 0, so zig-zag is a shift
	size := 1
	for u >= 0x80 {
		u >>= 7
		size++
	}
	return size
}
