package pubsubsink

import (
	"context"
	"errors"
	"strings"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/outboxrelay/outboxrelay/publishers"
)

var (
	// ErrClosed is returned by Publish and Probe after Close; unavailable.
	ErrClosed = errors.New("pubsub: publisher closed")
	// ErrInvalidMessage fails a message the service would refuse: a header
	// it cannot carry as an attribute, a key too long; permanent.
	ErrInvalidMessage = errors.New("message cannot be carried")
	// ErrTooLarge fails a message larger than Config.MaxMessageBytes;
	// permanent.
	ErrTooLarge = errors.New("message too large")
	// ErrNoTopic fails a message whose topic does not exist in the
	// project (gRPC NotFound); permanent.
	ErrNoTopic = errors.New("no such topic")
)

// classify marks err for the relay; it is the one place where the
// client's and gRPC's errors are translated:
//
//   - publishers.Permanent: ErrInvalidMessage, ErrTooLarge, the client's
//     ErrOversizedMessage, NotFound (ErrNoTopic), InvalidArgument,
//     FailedPrecondition, OutOfRange, and an Internal error for invalid
//     UTF-8;
//   - publishers.Unavailable: ErrClosed (the client stopped), Unavailable
//     (unreachable), Unauthenticated and PermissionDenied (credentials:
//     no message is at fault);
//   - unchanged, transient: DeadlineExceeded, ResourceExhausted (quota),
//     Aborted, Internal, Unknown, a key paused after an earlier failure
//     (pubsub.ErrPublishingPaused), and the caller's cancellation.
func classify(err error) error {
	var paused pubsub.ErrPublishingPaused
	switch {
	case err == nil, publishers.IsPermanent(err), errors.Is(err, publishers.ErrUnavailable),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.As(err, &paused):
		return err
	case errors.Is(err, ErrClosed), errors.Is(err, pubsub.ErrPublisherStopped):
		return publishers.Unavailable(err)
	case errors.Is(err, ErrInvalidMessage), errors.Is(err, ErrTooLarge), errors.Is(err, pubsub.ErrOversizedMessage):
		return publishers.Permanent(err)
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.NotFound:
		return publishers.Permanent(errors.Join(ErrNoTopic, err))
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return publishers.Permanent(err)
	case codes.Internal:
		if strings.Contains(st.Message(), "invalid UTF-8") {
			return publishers.Permanent(err)
		}
	case codes.Unavailable, codes.Unauthenticated, codes.PermissionDenied,
		codes.Canceled: // only Close or a drop cancels the client's requests
		return publishers.Unavailable(err)
	}
	return err
}
