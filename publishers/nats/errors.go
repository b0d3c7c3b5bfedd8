package natssink

import (
	"context"
	"errors"

	"github.com/outboxrelay/outboxrelay/publishers/internal/sinknet"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/publishers"
)

var (
	// ErrInvalidConfig is wrapped by the error New returns for an invalid
	// Config; the message names the field.
	ErrInvalidConfig = errors.New("nats: invalid config")
	// ErrClosed is returned by Publish and Probe after Close.
	ErrClosed = errors.New("nats: publisher closed")
	// ErrInvalidSubject fails a message whose topic is not a subject a
	// stream can capture (see the package documentation); permanent.
	ErrInvalidSubject = errors.New("invalid subject")
	// ErrInvalidHeader fails a message with a header NATS cannot carry
	// intact, or one whose name the sink or the server reserves; permanent.
	ErrInvalidHeader = errors.New("header cannot be carried")
	// ErrMessageTooLarge fails a message larger, headers included, than the
	// server's max_payload; permanent.
	ErrMessageTooLarge = errors.New("message larger than the server's max_payload")
	// ErrNoStream fails a message for a subject that no JetStream stream
	// captures; permanent.
	ErrNoStream = errors.New("no JetStream stream captures the subject")
	// ErrNoJetStream means the server answers but its JetStream does not
	// (not enabled for the server or the account); unavailable.
	ErrNoJetStream = errors.New("JetStream does not answer (is it enabled on the server and for the account? nats-server -js)")
	// ErrStreamSilent fails a message whose stream exists but did not
	// answer (no responders: a clustered stream electing a leader, say);
	// transient.
	ErrStreamSilent = errors.New("the stream that captures the subject did not answer")
	// ErrConnectionLost fails the messages not acknowledged when the
	// connection to the server broke; unavailable.
	ErrConnectionLost = errors.New("connection to the server lost")
)

// JetStream error codes of a PubAck the sink treats as the message's own
// fault: retrying the same message cannot succeed.
const (
	codeMessageTooLarge = jetstream.JSErrCodeStreamMessageExceedsMaximum // the stream's max_msg_size
	codeHeaderTooLarge  = 10097                                          // headers over 64 KiB
	codeStreamSealed    = 10109                                          // a sealed stream takes nothing more
)

// classify marks err for the relay; it is the one place where nats.go,
// JetStream and network errors are translated:
//
//   - publishers.Permanent: the message or its subject is refused
//     (ErrInvalidSubject, ErrInvalidHeader, ErrMessageTooLarge, ErrNoStream,
//     a PubAck error for a message over the stream's max_msg_size, headers
//     over 64 KiB, or a sealed stream);
//   - publishers.Unavailable: the server cannot take messages (ErrClosed,
//     ErrConnectionLost, ErrNoJetStream, a failed connect, an
//     authorization failure, no PubAck in time, a network or TLS error, a
//     deadline);
//   - unchanged: transient (ErrStreamSilent, other PubAck errors such as a
//     full stream with the discard-new policy), or the caller's
//     cancellation.
//
// Errors already marked are returned as they are.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case publishers.IsPermanent(err), errors.Is(err, publishers.ErrUnavailable):
		return err
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, ErrClosed), errors.Is(err, ErrConnectionLost), errors.Is(err, ErrNoJetStream):
		return publishers.Unavailable(err)
	case errors.Is(err, ErrInvalidSubject), errors.Is(err, ErrInvalidHeader),
		errors.Is(err, ErrMessageTooLarge), errors.Is(err, ErrNoStream),
		errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrBadHeaderMsg):
		return publishers.Permanent(err)
	case errors.Is(err, ErrStreamSilent):
		return err
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case codeMessageTooLarge, codeHeaderTooLarge, codeStreamSealed:
			return publishers.Permanent(err)
		case jetstream.JSErrCodeJetStreamNotEnabled, jetstream.JSErrCodeJetStreamNotEnabledForAccount:
			return publishers.Unavailable(err)
		}
		return err
	}
	var connect *connectError
	if errors.As(err, &connect) || isSinkError(err) || sinknet.IsNetworkError(err) {
		return publishers.Unavailable(err)
	}
	return err
}

// connectError is a failure to connect to any server: unreachable,
// refused, TLS, authentication. It always makes the sink unavailable.
type connectError struct{ err error }

func (e *connectError) Error() string { return "connect: " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// isSinkError reports whether err is a nats.go or JetStream error that
// says the server, not the message, is the problem.
func isSinkError(err error) bool {
	for _, target := range []error{
		nats.ErrConnectionClosed,
		nats.ErrConnectionDraining,
		nats.ErrConnectionReconnecting,
		nats.ErrDisconnected,
		nats.ErrNoServers,
		nats.ErrTimeout,
		nats.ErrStaleConnection,
		nats.ErrAuthorization,
		nats.ErrAuthExpired,
		nats.ErrAuthRevoked,
		nats.ErrNoResponders, // to a JetStream API request
		nats.ErrReconnectBufExceeded,
		jetstream.ErrConnectionClosed,
		jetstream.ErrAsyncPublishTimeout,
		jetstream.ErrTooManyStalledMsgs,
		jetstream.ErrJetStreamNotEnabled,
		jetstream.ErrJetStreamNotEnabledForAccount,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
