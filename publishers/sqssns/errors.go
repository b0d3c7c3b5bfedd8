package sqssns

import (
	"context"
	"errors"
	"fmt"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/outboxrelay/outboxrelay/publishers"
)

// ErrNoDestination means the queue or topic does not exist.
var ErrNoDestination = errors.New("sqssns: no such queue or topic")

// permanentCodes are the error codes no retry fixes.
var permanentCodes = map[string]bool{
	"QueueDoesNotExist": true, "AWS.SimpleQueueService.NonExistentQueue": true, "NotFound": true,
	"InvalidParameter": true, "InvalidParameterValue": true, "InvalidMessageContents": true,
	"InvalidAttributeName": true, "InvalidAttributeValue": true, "BatchRequestTooLong": true,
	"BatchEntryIdsNotDistinct": true, "TooManyEntriesInBatchRequest": true, "InvalidBatchEntryId": true,
	"UnsupportedOperation": true, "AWS.SimpleQueueService.UnsupportedOperation": true,
}

// classify sorts an SDK error: a transport failure (no answer) or a ctx
// that ended is Unavailable, a code of permanentCodes Permanent (a missing
// queue or topic wrapping ErrNoDestination), anything else (throttling,
// 5xx, access denied, expired credentials) transient.
func classify(err error) error {
	var api smithy.APIError
	var send *smithyhttp.RequestSendError
	var resp *awshttp.ResponseError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &send):
		return publishers.Unavailable(err)
	case errors.As(err, &api) && (api.ErrorCode() == "QueueDoesNotExist" || api.ErrorCode() == "NotFound" ||
		api.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue"):
		return publishers.Permanent(fmt.Errorf("%w: %w", ErrNoDestination, err))
	case errors.As(err, &api) && permanentCodes[api.ErrorCode()]:
		return publishers.Permanent(err)
	case errors.As(err, &resp) && resp.HTTPStatusCode() == 0:
		return publishers.Unavailable(err)
	}
	return err
}

// entryError is the error of one failed batch entry: Permanent when AWS
// says the sender is at fault.
func entryError(code, message string, senderFault bool) error {
	err := fmt.Errorf("sqssns: entry refused: %s: %s", code, message)
	if senderFault || permanentCodes[code] {
		return publishers.Permanent(err)
	}
	return err
}
