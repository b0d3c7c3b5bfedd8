package relay

import (
	"context"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// Publisher is a sink. Publish sends msgs and returns nil when every message
// was acknowledged, a publishers.Errors (one entry per message) for partial
// failure, or another error that applies to the whole batch. Failures are
// classified with publishers.Permanent and publishers.Unavailable; see
// package publishers. Publish must honour ctx.
type Publisher interface {
	Publish(ctx context.Context, msgs []outbox.Message) error
	Close() error
}
