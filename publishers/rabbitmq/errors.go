package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/outboxrelay/outboxrelay/publishers/internal/sinknet"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

var (
	// ErrInvalidConfig is wrapped by the error New returns for an invalid
	// Config; the message names the field.
	ErrInvalidConfig = errors.New("rabbitmq: invalid config")
	// ErrClosed is returned by Publish and Probe after Close.
	ErrClosed = errors.New("rabbitmq: publisher closed")
	// ErrInvalidDestination is wrapped by the error of a message whose
	// topic maps to no valid exchange and routing key (ParseDestination).
	ErrInvalidDestination = errors.New("rabbitmq: invalid destination")
	// ErrTooLarge is wrapped by the error of a message larger than
	// Config.MaxMessageBytes, or than the broker's max_message_size.
	ErrTooLarge = errors.New("rabbitmq: message too large")
	// ErrNacked is wrapped by the error of a message the broker
	// negatively acknowledged (basic.nack): it did not take it, for now.
	ErrNacked = errors.New("rabbitmq: message nacked by the broker")
	// ErrConnectionLost is wrapped by the errors of the messages whose
	// outcome the closing of the connection left unknown, and of those it
	// kept from being sent.
	ErrConnectionLost = errors.New("rabbitmq: connection lost")
	// ErrChannelClosed is wrapped by the errors of messages whose channel
	// the broker closed because of another message (a missing exchange, a
	// message over its max_message_size): they were not refused themselves.
	ErrChannelClosed = errors.New("rabbitmq: channel closed by the broker because of another message")
)

// ReturnedError is the error of a message the broker returned (basic.return)
// because no queue was bound to take it: Publish sets mandatory.
type ReturnedError struct {
	// Destination is where the message was published.
	Destination Destination
	// Code and Text are the broker's reply (312 NO_ROUTE).
	Code int
	Text string
}

// Error implements error.
func (e *ReturnedError) Error() string {
	what := fmt.Sprintf("exchange %q", e.Destination.Exchange)
	if e.Destination.Exchange == "" {
		what = "the default exchange (no queue of that name)"
	}
	return fmt.Sprintf("rabbitmq: message returned by the broker (%d %s): no queue bound to %s with routing key %q",
		e.Code, e.Text, what, e.Destination.RoutingKey)
}

// AMQP reply codes that matter here (amqp091-go names most of them).
const (
	codeNotFound           = amqp.NotFound           // 404: the exchange does not exist
	codePreconditionFailed = amqp.PreconditionFailed // 406: e.g. over max_message_size
)

// isHardError reports whether an AMQP reply code is a connection-level
// ("hard") error, which closes the whole connection: 320
// CONNECTION_FORCED (a broker shutting down, an operator's close) and the
// 5xx codes, among them amqp091-go's own 501 for a broken socket and 504
// for a closed channel or connection (amqp.ErrClosed). No message can get
// through such a connection.
func isHardError(code int) bool {
	return code == amqp.ConnectionForced || code >= 500
}

// classify marks err for the relay, which is the one place where
// amqp091-go, network and this package's errors are translated:
//
//   - publishers.Permanent: the message itself is refused: returned as
//     unroutable (ReturnedError), its exchange does not exist (404), too
//     large (ErrTooLarge), invalid destination or header;
//   - publishers.Unavailable: the broker as a whole cannot take messages:
//     dial, TLS or authentication failures, a lost connection
//     (ErrConnectionLost, connection-level reply codes, network errors),
//     the publish deadline, a closed publisher;
//   - unchanged: transient: a nack (ErrNacked), a channel closed by
//     another message's fault (ErrChannelClosed), other channel errors
//     such as 403 ACCESS_REFUSED on an exchange (an operator's fix away),
//     or the caller's cancellation.
//
// Errors already marked are returned as they are.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case publishers.IsPermanent(err), errors.Is(err, publishers.ErrUnavailable):
		return err
	case errors.Is(err, ErrClosed), errors.Is(err, ErrConnectionLost):
		return publishers.Unavailable(err) // no attempt is spent on a closed sink
	case errors.Is(err, ErrChannelClosed), errors.Is(err, ErrNacked):
		return err
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return publishers.Unavailable(err)
	}
	var returned *ReturnedError
	switch {
	case errors.As(err, &returned),
		errors.Is(err, ErrTooLarge),
		errors.Is(err, ErrInvalidDestination),
		errors.Is(err, outbox.ErrInvalidHeader):
		return publishers.Permanent(err)
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch {
		case ae.Code == codeNotFound:
			return publishers.Permanent(err)
		case isHardError(ae.Code):
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

// missingExchangeRE finds the exchange in RabbitMQ's 404 reply text:
// "NOT_FOUND - no exchange 'orders' in vhost '/'".
var missingExchangeRE = regexp.MustCompile(`no exchange '(.*)' in vhost`)

// missingExchange returns the exchange a channel error says does not
// exist.
func missingExchange(ae *amqp.Error) (string, bool) {
	if ae == nil || ae.Code != codeNotFound {
		return "", false
	}
	m := missingExchangeRE.FindStringSubmatch(ae.Reason)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// tooLargeRE finds the limit in RabbitMQ's 406 reply text: "message size
// 2000 is larger than configured max size 1000" (or "... than max size").
var tooLargeRE = regexp.MustCompile(`message size (\d+) is larger than (?:configured )?max size (\d+)`)

// brokerMaxSize returns the max_message_size a channel error says a
// message exceeded.
func brokerMaxSize(ae *amqp.Error) (int, bool) {
	if ae == nil || ae.Code != codePreconditionFailed {
		return 0, false
	}
	m := tooLargeRE.FindStringSubmatch(ae.Reason)
	if m == nil {
		return 0, false
	}
	limit, err := strconv.Atoi(m[2])
	return limit, err == nil
}
