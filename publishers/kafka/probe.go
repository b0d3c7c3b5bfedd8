package kafka

import (
	"context"
	"errors"
	"fmt"

	kafkago "github.com/segmentio/kafka-go"
)

// Probe reports whether a broker answers, without publishing anything: it
// dials the bootstrap brokers in turn (TLS and SASL included) and asks the
// first that accepts for its API versions. It returns nil when one
// answered, and otherwise the error of each, classified like Publish's
// (publishers.ErrUnavailable for unreachable brokers).
//
// The relay probes a sink it found down this way (publishers.Prober) rather
// than with rows. A successful Probe also drops the publisher's pooled
// connections and cached metadata, so that the next Publish starts afresh
// rather than on connections the outage broke.
func (p *Publisher) Probe(ctx context.Context) error {
	if p.closed.Load() {
		return classify(ErrClosed)
	}
	dialer := &kafkago.Dialer{
		Timeout:       p.cfg.DialTimeout,
		ClientID:      p.cfg.ClientID,
		TLS:           p.cfg.TLS,
		SASLMechanism: p.sasl,
	}
	var errs []error
	for _, addr := range p.cfg.Brokers {
		err := probeBroker(ctx, dialer, addr)
		if err == nil {
			// The next request dials afresh and loads new metadata;
			// requests in flight keep their connections until they end.
			p.transport.CloseIdleConnections()
			return nil
		}
		errs = append(errs, fmt.Errorf("broker %s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return classify(fmt.Errorf("kafka: probe: %w", errors.Join(errs...)))
}

// probeBroker dials addr and asks for its API versions within ctx.
func probeBroker(ctx context.Context, dialer *kafkago.Dialer, addr string) error {
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return err
		}
	}
	_, err = conn.ApiVersions()
	return err
}
