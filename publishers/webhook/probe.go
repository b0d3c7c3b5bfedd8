package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/outboxrelay/outboxrelay/publishers"
)

// Probe reports whether the receiver answers, without publishing anything.
// With Config.ProbeURL it GETs that URL and wants a 2xx answer; otherwise
// it asks the host of Config.URL "OPTIONS *" and wants any answer from the
// server (see probeServer): an HTTP answer is exactly what Publish found
// missing when it reported the sink unavailable. It
// returns nil when the receiver answers and a publishers.ErrUnavailable
// error otherwise (the context's error included), within ctx and
// Config.Timeout.
//
// The relay probes a sink it found down this way (publishers.Prober) rather
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
		err = p.probeServer(ctx)
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

// probeServer asks the host of Config.URL "OPTIONS *", the request
// about the server as a whole (RFC 9110, 9.3.7), which touches no
// resource. Any answer but 502, 503 and 504 (a gateway without its
// server, or a server that says it is unavailable) means the receiver
// answers: 404, 405 or 501 included.
func (p *Publisher) probeServer(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodOptions, p.url.origin, nil)
	if err != nil {
		return err // validate parsed the URL: not reached
	}
	req.URL.Opaque = "*"
	for name, values := range p.static {
		req.Header[name] = values
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("OPTIONS * at %s: %w", p.url.origin, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return fmt.Errorf("OPTIONS * at %s: %s", p.url.origin, resp.Status)
	}
	return nil
}
