package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"

	"github.com/outboxrelay/outboxrelay/publishers"
)

// Probe reports whether the receiver answers, without publishing anything.
// With Config.ProbeURL it GETs that URL and wants a 2xx answer; otherwise
// it opens a connection to the host of Config.URL, completing the TLS
// handshake for https, and closes it without sending a request: exactly
// what Publish finds missing when it reports the sink unavailable. It
// returns nil when the receiver answers and a publishers.ErrUnavailable
// error otherwise (the context's error included), within ctx and
// Config.Timeout.
//
// The relay probes a sink it found down this way (relay.Prober) rather
// than with rows. A successful Probe also drops the publisher's pooled
// connections, so that the next Publish starts afresh rather than on
// connections the outage broke.
func (p *Publisher) Probe(ctx context.Context) error {
	if p.closed.Load() {
		return classify(ErrClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	var err error
	if p.cfg.ProbeURL != "" {
		err = p.probeURL(ctx)
	} else {
		err = p.probeHost(ctx)
	}
	if err != nil {
		return publishers.Unavailable(fmt.Errorf("webhook: probe: %w", err))
	}
	p.transport.CloseIdleConnections()
	return nil
}

// probeURL GETs Config.ProbeURL and wants a 2xx answer.
func (p *Publisher) probeURL(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.ProbeURL, nil)
	if err != nil {
		return err // validate parsed the URL: not reached
	}
	for name, values := range p.static {
		req.Header[name] = values
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("GET %s: %w", redactURL(p.cfg.ProbeURL), err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return fmt.Errorf("GET %s: %s", redactURL(p.cfg.ProbeURL), resp.Status)
	}
	return nil
}

// probeHost connects to the host of Config.URL, and completes a TLS
// handshake for https.
func (p *Publisher) probeHost(ctx context.Context) error {
	dialer := &net.Dialer{Timeout: p.cfg.DialTimeout}
	conn, err := dialer.DialContext(ctx, "tcp", p.url.host)
	if err != nil {
		return err
	}
	defer conn.Close()
	if !p.url.tls {
		return nil
	}
	cfg := p.cfg.TLS.Clone()
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(p.url.host)
		cfg.ServerName = host
	}
	hctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	if err := tls.Client(conn, cfg).HandshakeContext(hctx); err != nil {
		return fmt.Errorf("TLS handshake with %s: %w", p.url.host, err)
	}
	return nil
}
