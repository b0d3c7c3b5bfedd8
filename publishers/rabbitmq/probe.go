package rabbitmq

import (
	"context"
	"fmt"
)

// Probe reports whether the broker answers, without publishing anything:
// it connects if there is no open connection (TLS and authentication
// included) and opens a channel in confirm mode, two round trips, which it
// keeps for the next Publish. It returns nil when the broker answered,
// and otherwise the error, classified like Publish's
// (publishers.ErrUnavailable for an unreachable broker); it honours ctx.
//
// A Probe whose ctx ends before the broker answered also breaks off the
// connection, should it be dead without knowing it yet (a broker gone
// without closing it): the next Probe dials afresh.
//
// The relay probes a sink it found down this way (publishers.Prober) rather
// than with rows.
func (p *Publisher) Probe(ctx context.Context) error {
	if p.closed.Load() {
		return classify(ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return classify(fmt.Errorf("rabbitmq: probe: %w", err))
	}
	c, err := p.newChannel(ctx)
	if err != nil {
		if ctx.Err() != nil {
			// A connection that cannot open a channel in time may be dead
			// without knowing it yet (a broker gone without a word): the
			// next probe dials afresh instead of waiting for heartbeats.
			if l := p.current(); l != nil {
				l.abort()
			}
		}
		return classify(fmt.Errorf("rabbitmq: probe: %w", err))
	}
	p.release(c, true)
	return nil
}
