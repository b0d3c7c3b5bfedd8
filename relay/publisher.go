package relay

import (
	"context"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// Publisher is a sink. Publish sends msgs and returns nil when every message
// was acknowledged, a publishers.Errors (one entry per message) for partial
// failure, or another error that applies to the whole batch. Failures are
// classified with publishers.Permanent and publishers.Unavailable. Publish
// must honour ctx. The whole contract is written in package publishers, and
// publishers/publisherstest checks a sink against it.
type Publisher interface {
	Publish(ctx context.Context, msgs []outbox.Message) error
	Close() error
}

// Prober is implemented by sinks that can tell cheaply, without publishing
// anything, whether they answer (a metadata request, a ping). Probe returns
// nil when the sink answers. While such a sink is down, Run claims no rows
// and probes it every ProbeInterval; the first answer ends the outage.
// Sinks without it are probed with one-row batches. Probe must honour ctx.
type Prober interface {
	Probe(ctx context.Context) error
}
