package cloudevents

import (
	"context"
	"errors"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// Wrap returns a publisher that converts every message (Config.Convert)
// and publishes the result through p. A message that cannot be converted
// fails permanently; the others are published. It implements
// publishers.Prober exactly when p does, and answers KeyBatches for p.
// Close closes p.
func Wrap(p publishers.Publisher, c Config) (publishers.Publisher, error) {
	if p == nil {
		return nil, errors.New("cloudevents: nil publisher")
	}
	if err := c.Check(); err != nil {
		return nil, err
	}
	w := &wrapper{p: p, c: c}
	if pr, ok := p.(publishers.Prober); ok {
		return &probingWrapper{w, pr}, nil
	}
	return w, nil
}

type wrapper struct {
	p publishers.Publisher
	c Config
}

type probingWrapper struct {
	*wrapper
	publishers.Prober
}

// Publish converts msgs and publishes those that converted.
func (w *wrapper) Publish(ctx context.Context, msgs []outbox.Message) error {
	out := make([]outbox.Message, 0, len(msgs))
	var results []error // only when a message fails to convert
	index := make([]int, 0, len(msgs))
	for i, m := range msgs {
		cm, err := w.c.Convert(m)
		if err != nil {
			if results == nil {
				results = make([]error, len(msgs))
			}
			results[i] = publishers.Permanent(err)
			continue
		}
		out, index = append(out, cm), append(index, i)
	}
	if results == nil {
		return w.p.Publish(ctx, out)
	}
	if len(out) > 0 {
		for j, err := range publishers.PerMessage(w.p.Publish(ctx, out), len(out)) {
			results[index[j]] = err
		}
	}
	return publishers.Errors(results)
}

// KeyBatches answers for the wrapped publisher (publishers.KeyBatcher).
func (w *wrapper) KeyBatches() bool {
	kb, ok := w.p.(publishers.KeyBatcher)
	return ok && kb.KeyBatches()
}

// Close closes the wrapped publisher.
func (w *wrapper) Close() error { return w.p.Close() }
