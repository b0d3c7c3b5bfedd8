package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/stdwebhooks"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// Publisher POSTs outbox messages to an HTTP endpoint, one request per
// message, synchronously: every request of a Publish call is answered, or
// abandoned, before the call returns. Its methods are safe for concurrent
// use.
type Publisher struct {
	cfg         Config
	url         *template
	keys        [][]byte    // decoded Config.Secrets
	static      http.Header // Config.Headers, canonical names
	contentType []string
	transport   *http.Transport
	client      *http.Client
	// slots holds a token per request in flight, across Publish calls:
	// at most MaxInFlight.
	slots chan struct{}
	now   func() time.Time // the clock of webhook-timestamp and Retry-After dates

	closed    atomic.Bool
	closeOnce sync.Once
}

// New returns a Publisher for cfg. It does not connect: the first Publish
// does. The error of an invalid cfg joins one *ConfigError per invalid
// field (each wraps ErrInvalidConfig); errors.As finds the first.
func New(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tmpl, err := parseTemplate(cfg.URL)
	if err != nil {
		return nil, err // validate checked it
	}
	p := &Publisher{
		cfg:         cfg,
		url:         tmpl,
		static:      make(http.Header, len(cfg.Headers)),
		contentType: []string{cfg.ContentType},
		slots:       make(chan struct{}, cfg.MaxInFlight),
		now:         time.Now,
	}
	for _, s := range cfg.Secrets {
		key, err := stdwebhooks.ParseSecret(s)
		if err != nil {
			return nil, err // validate checked it
		}
		p.keys = append(p.keys, key)
	}
	for name, value := range cfg.Headers {
		p.static.Set(name, value)
	}
	p.transport = &http.Transport{
		// No proxy from the environment: the URL names the one host the
		// sink talks to, which Probe checks directly.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     cfg.TLS.Clone(),
		TLSHandshakeTimeout: cfg.DialTimeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        cfg.MaxInFlight,
		MaxIdleConnsPerHost: cfg.MaxInFlight,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // answers are read for their status only
	}
	p.client = &http.Client{
		Transport: p.transport,
		// A redirect is an answer, not followed: see StatusError.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return p, nil
}

// Publish POSTs each message to its topic's URL and waits for the
// answers.
//
// It returns nil when every message was answered 2xx, a publishers.Errors
// with one entry per message when the outcomes differ, and a single error
// when every message failed because the host cannot be reached
// (publishers.ErrUnavailable). Each failure is classified as classify
// describes.
//
// The messages of one key are sent one after the other, in their order in
// msgs: each request starts once the previous one of its key was answered
// 2xx or refused for good. When one fails otherwise, the key's later
// messages in msgs are not sent and fail with an error that wraps its
// failure (the same class), so that they are retried after it. Different
// keys, and messages without a key, are sent in parallel, up to
// Config.MaxInFlight requests at once across all Publish calls. Once a
// request finds the host unreachable, the messages not yet sent fail
// unavailable without trying.
//
// When ctx ends first, Publish returns at once with ctx's error for the
// messages not answered, and sends nothing more for them. A request the
// receiver was reading when ctx ended may still be processed by it: its
// outcome is unknown. Publish does not keep msgs after it returns.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if p.closed.Load() {
		return classify(ErrClosed)
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return classify(fmt.Errorf("webhook: publish: %w", err))
	}
	// Close does not wait for this call: if it came meanwhile, drop the
	// connections this call returned to the pool.
	defer func() {
		if p.closed.Load() {
			p.transport.CloseIdleConnections()
		}
	}()
	b := &batch{p: p, ctx: ctx, msgs: msgs, reqs: make([]request, len(msgs)), results: make([]error, len(msgs))}
	chains := b.prepare()
	workers := min(p.cfg.MaxInFlight, len(chains))
	if workers == 1 {
		b.sendChain(chains[0])
		return publishers.Summarize(b.results)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(chains) {
					return
				}
				b.sendChain(chains[i])
			}
		})
	}
	wg.Wait()
	return publishers.Summarize(b.results)
}

// batch is one Publish call in progress.
type batch struct {
	p       *Publisher
	ctx     context.Context
	msgs    []outbox.Message
	reqs    []request
	results []error // results[i] is written only by the goroutine sending msgs[i]
	// down holds the first unavailable failure: the host cannot be
	// reached, and the messages not yet sent fail alike without trying.
	down atomic.Pointer[downError]
}

type downError struct{ err error }

// prepare builds each message's request, failing those that cannot be
// sent, and returns the chains to send: the indexes of one key's messages
// in their order, or of one message without a key.
func (b *batch) prepare() [][]int {
	var chains [][]int
	byKey := make(map[string]int)
	for i := range b.msgs {
		m := &b.msgs[i]
		req, err := b.p.prepare(m)
		if err != nil {
			b.results[i] = classify(err)
			continue // a message that is never sent holds nothing up
		}
		b.reqs[i] = req
		if m.Key == nil {
			chains = append(chains, []int{i})
			continue
		}
		if c, ok := byKey[string(m.Key)]; ok {
			chains[c] = append(chains[c], i)
			continue
		}
		byKey[string(m.Key)] = len(chains)
		chains = append(chains, []int{i})
	}
	return chains
}

// sendChain sends the messages of chain one after the other. A failure
// that is not permanent stops the chain: the later messages fail with an
// error wrapping it, so that they keep their place behind it.
func (b *batch) sendChain(chain []int) {
	for j, i := range chain {
		err := b.send(i)
		b.results[i] = err
		if err == nil || publishers.IsPermanent(err) {
			continue
		}
		for _, k := range chain[j+1:] {
			b.results[k] = fmt.Errorf("webhook: event %s not sent: event %s of its key failed before it: %w", b.msgs[k].ID, b.msgs[i].ID, err)
		}
		return
	}
}

// send sends msgs[i] when a slot is free, unless the host was found down
// or ctx ended meanwhile.
func (b *batch) send(i int) error {
	m := &b.msgs[i]
	if d := b.down.Load(); d != nil {
		return fmt.Errorf("webhook: event %s not sent: %w", m.ID, d.err)
	}
	if err := b.ctx.Err(); err != nil {
		return fmt.Errorf("webhook: event %s not sent: %w", m.ID, err)
	}
	select {
	case b.p.slots <- struct{}{}:
	case <-b.ctx.Done():
		return fmt.Errorf("webhook: event %s not sent: %w", m.ID, b.ctx.Err())
	}
	defer func() { <-b.p.slots }()
	err := b.p.post(b.ctx, m, &b.reqs[i])
	if errors.Is(err, publishers.ErrUnavailable) {
		b.down.CompareAndSwap(nil, &downError{err})
	}
	return err
}

// Response bodies are read up to maxDrain bytes, so that the connection
// can serve the next request; the first maxQuoted go into a StatusError.
const (
	maxDrain  = 64 << 10
	maxQuoted = 256
)

// post makes one request for m, within Config.Timeout, and classifies its
// outcome.
func (p *Publisher) post(ctx context.Context, m *outbox.Message, r *request) error {
	rctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, r.url, bytes.NewReader(m.Payload))
	if err != nil {
		return classify(fmt.Errorf("webhook: event %s: %w: %v", m.ID, ErrInvalidMessage, err))
	}
	req.Header = r.header
	ts := p.now().Unix()
	req.Header[HeaderWebhookTimestamp] = []string{strconv.FormatInt(ts, 10)}
	if len(p.keys) > 0 {
		req.Header[HeaderWebhookSignature] = []string{sign(p.keys, m.ID.String(), ts, m.Payload)}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // it quotes the URL, which r.shown gives redacted
		}
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case rctx.Err() != nil:
			err = fmt.Errorf("%w (%v): %w", ErrTimeout, p.cfg.Timeout, err)
		}
		return classify(fmt.Errorf("webhook: POST %s: event %s: %w", r.shown, m.ID, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
		return nil
	}
	quoted, _ := io.ReadAll(io.LimitReader(resp.Body, maxQuoted))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	serr := &StatusError{
		Code:       resp.StatusCode,
		Status:     resp.Status,
		URL:        r.shown,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), p.now()),
		Body:       strings.TrimSpace(strings.ToValidUTF8(string(quoted), "?")),
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		serr.Location = resp.Header.Get("Location")
	}
	return classify(serr)
}

// Config returns the configuration in effect, defaults filled in. Its
// String and LogValue hide the secrets and header values.
func (p *Publisher) Config() Config { return p.cfg }

// Close closes the publisher's idle connections; Publish and Probe fail
// with ErrClosed (unavailable) afterwards. It does not wait for Publish
// calls in flight: they end with their context. Close is idempotent and
// returns nil.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		p.transport.CloseIdleConnections()
	})
	return nil
}

// String describes the publisher without secrets.
func (p *Publisher) String() string {
	return "webhook.Publisher{" + redactURL(p.cfg.URL) + "}"
}
