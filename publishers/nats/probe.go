package natssink

import (
	"context"
	"errors"
	"fmt"
)

// Probe reports whether JetStream answers, without publishing anything: it
// connects when there is no live connection and asks for the account's
// JetStream information. It returns nil when JetStream answered, and
// otherwise an error classified like Publish's (publishers.ErrUnavailable
// for an unreachable server or one without JetStream).
//
// The relay probes a sink it found down this way (publishers.Prober) rather
// than with rows. A probe that gets no answer in time drops the
// connection, so that the next one dials afresh rather than wait on a
// connection the network silently broke.
func (p *Publisher) Probe(ctx context.Context) error {
	c, err := p.connection(ctx)
	if err != nil {
		return classify(fmt.Errorf("nats: probe: %w", err))
	}
	reqCtx, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
	defer cancel()
	if _, err := c.js.AccountInfo(reqCtx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) { // this timeout or the caller's deadline; not a cancellation
			p.drop(c)
		}
		return classify(fmt.Errorf("nats: probe: JetStream account info: %w", err))
	}
	return nil
}
