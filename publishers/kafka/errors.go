package kafka

import (
	"context"
	"errors"

	"github.com/outboxrelay/outboxrelay/publishers/internal/sinknet"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outboxrelay/outboxrelay/publishers"
)

var (
	// ErrInvalidConfig is wrapped by the error New returns for an invalid
	// Config; the message names the field.
	ErrInvalidConfig = errors.New("kafka: invalid config")
	// ErrClosed is returned by Publish after Close.
	ErrClosed = errors.New("kafka: publisher closed")
)

// Broker error codes by what they say about the failed messages. Codes in
// neither set (NotEnoughReplicas, LeaderNotAvailable, NotLeaderForPartition,
// RequestTimedOut, ...) are transient: a later retry may succeed.
var (
	// recordCodes reject something in the record batch itself. The broker
	// rejects the whole batch, so the messages that share it with the
	// culprit fail too: Publish re-sends them alone to find the culprit.
	recordCodes = map[kafkago.Error]bool{
		kafkago.InvalidMessage:      true, // CORRUPT_MESSAGE
		kafkago.InvalidMessageSize:  true,
		kafkago.MessageSizeTooLarge: true,
		kafkago.RecordListTooLarge:  true,
		kafkago.InvalidTimestamp:    true,
		kafkago.InvalidRecord:       true, // e.g. a record without key on a compacted topic
	}
	// topicCodes reject the topic: every message for it fails alike.
	// TopicAuthorizationFailed is not among them: a missing ACL is an
	// operator's fix away, so it is retried rather than failing every event
	// of the topic at once.
	topicCodes = map[kafkago.Error]bool{
		kafkago.UnknownTopicOrPartition: true,
		kafkago.InvalidTopic:            true,
	}
	// sinkCodes mean that no message can get through: the brokers are
	// unreachable or refuse this client as a whole.
	sinkCodes = map[kafkago.Error]bool{
		kafkago.BrokerNotAvailable:         true,
		kafkago.NetworkException:           true,
		kafkago.SASLAuthenticationFailed:   true,
		kafkago.UnsupportedSASLMechanism:   true,
		kafkago.IllegalSASLState:           true,
		kafkago.ClusterAuthorizationFailed: true,
		kafkago.SecurityDisabled:           true,
	}
)

// classify marks err for the relay, which is the one place where kafka-go
// and network errors are translated:
//
//   - publishers.Permanent: the message itself or its topic is rejected
//     (recordCodes, topicCodes, or a client-side MessageTooLargeError);
//   - publishers.Unavailable: the sink as a whole cannot take messages
//     (sinkCodes, network and TLS failures, a publish deadline);
//   - unchanged: transient, or the caller's cancellation.
//
// Errors already marked are returned as they are.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case publishers.IsPermanent(err), errors.Is(err, publishers.ErrUnavailable):
		return err
	case errors.Is(err, ErrClosed):
		return publishers.Unavailable(err) // no attempt is spent on a closed sink
	case errors.Is(err, context.Canceled):
		return err
	}
	var code kafkago.Error
	if errors.As(err, &code) {
		switch {
		case recordCodes[code], topicCodes[code]:
			return publishers.Permanent(err)
		case sinkCodes[code]:
			return publishers.Unavailable(err)
		default:
			return err
		}
	}
	if sinknet.IsNetworkError(err) {
		return publishers.Unavailable(err)
	}
	return err
}

// isRecordLevel reports whether err rejects a record batch for its content,
// so that the messages sharing the batch need to be told apart.
func isRecordLevel(err error) bool {
	var code kafkago.Error
	return errors.As(err, &code) && recordCodes[code]
}
