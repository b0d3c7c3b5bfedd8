package publishers

import (
	"context"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// Publisher is a sink. Publish sends msgs and returns nil when every message
// was acknowledged, an Errors (one entry per message) for partial failure,
// or another error that applies to the whole batch. Failures are classified
// with Permanent and Unavailable. Publish must honour ctx. The whole
// contract is written in this package's documentation, and
// publishers/publisherstest checks a sink against it.
type Publisher interface {
	Publish(ctx context.Context, msgs []outbox.Message) error
	Close() error
}

// Prober is implemented by sinks that can tell cheaply, without publishing
// anything, whether they answer (a metadata request, a ping). Probe returns
// nil when the sink answers. While such a sink is down, the relay claims no
// rows and probes it every ProbeInterval; the first answer ends the outage.
// Sinks without it are probed with one-row batches. Probe must honour ctx.
type Prober interface {
	Probe(ctx context.Context) error
}

// KeyBatcher is implemented by sinks that can take several events of one
// key in one Publish call without risking their order. KeyBatches reports
// whether this publisher can (a wrapper answers for the sink it wraps):
// one key's messages in a call are delivered in their order, and once one
// of them fails other than permanently (Permanent), none of the key's later
// messages in the call is sent, then or later in the background: each gets
// an error. A permanent failure, which the relay fails at once, does not
// hold back the messages behind it.
//
// The relay's ordered loop then publishes a key's whole run of claimed
// events in one call instead of one event per key per call, and treats the
// events behind a key's first failed one as not attempted
// (docs/ordering.md). Sinks that do not implement it, or answer false, get
// one event per key per call. publishers/publisherstest checks the promise
// for sinks that declare Features.KeyBatches.
type KeyBatcher interface {
	KeyBatches() bool
}
