package redisstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxrelay/outboxrelay/publishers"
)

// Probe reports whether Redis answers, without writing anything: it sends
// PING on a pooled connection. It returns nil when Redis answered PONG,
// and otherwise an error wrapping publishers.ErrUnavailable (a server
// still loading its dataset or busy with a script answers PING with an
// error, and counts as down). It returns at once when ctx ends.
//
// PING succeeds while Redis refuses writes for the whole server (OOM,
// READONLY, MISCONF, NOREPLICAS): the relay then tries a batch, which
// fails as unavailable again, and waits longer before the next trial.
func (p *Publisher) Probe(ctx context.Context) error {
	if p.closed.Load() {
		return publishers.Unavailable(ErrClosed)
	}
	err := ctx.Err()
	if err == nil {
		var pingErr error
		if err = runCtx(ctx, func() { pingErr = p.client.Ping(ctx).Err() }); err == nil {
			err = pingErr
		}
	}
	if err == nil {
		return nil
	}
	err = classify(fmt.Errorf("redisstream: probe: %w", err))
	if !errors.Is(err, publishers.ErrUnavailable) {
		err = publishers.Unavailable(err) // whatever PING got, Redis did not answer it
	}
	return err
}
