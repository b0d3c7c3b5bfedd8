package natssink

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// closeWait bounds how long Close waits for the client to close a
// connection; a connection whose last write does not drain is left to the
// client's write timeout (PublishTimeout).
const closeWait = time.Second

// conn is one connection to a server with its JetStream context. It never
// reconnects: once the server is lost, dead is closed and the Publisher
// dials a new conn for the next call.
type conn struct {
	nc *nats.Conn
	js jetstream.JetStream
	// maxPayload is the server's max_payload, from its INFO.
	maxPayload int64
	// slots holds one token per message sent and not yet acknowledged;
	// its capacity is Config.MaxInFlight. The PubAck handlers of js free a
	// slot for each message whatever its outcome (ack, error, timeout).
	slots chan struct{}
	// dead is closed when nc closes, by the server, the network or Close.
	dead     chan struct{}
	deadOnce sync.Once
}

// dialing is a connection attempt in progress; callers wait on done.
type dialing struct {
	done chan struct{}
	c    *conn
	err  error
}

// connection returns the live connection, dialing one when there is none.
// One dial runs at a time; callers wait for it within ctx. A dial outlives
// a caller whose ctx ended: its connection serves the next call.
func (p *Publisher) connection(ctx context.Context) (*conn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if c := p.cur; c != nil && !c.isDead() {
		p.mu.Unlock()
		return c, nil
	}
	p.cur = nil
	d := p.dialing
	if d == nil {
		d = &dialing{done: make(chan struct{})}
		p.dialing = d
		go p.dial(d)
	}
	p.mu.Unlock()
	select {
	case <-d.done:
		return d.c, d.err
	case <-ctx.Done():
		return nil, fmt.Errorf("connect: %w", ctx.Err())
	}
}

// dial connects, installs the connection unless the Publisher was closed
// meanwhile, and wakes the callers waiting on d.
func (p *Publisher) dial(d *dialing) {
	c, err := p.connect()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dialing = nil
	if err == nil && p.closed {
		c.close()
		c, err = nil, ErrClosed
	}
	if err == nil {
		p.cur = c
	}
	d.c, d.err = c, err
	close(d.done)
}

// connect opens a connection to one of the servers, without reconnection
// (a lost connection fails what it carried and is replaced on the next
// call), and its JetStream context with the PubAck handlers that free
// in-flight slots.
func (p *Publisher) connect() (*conn, error) {
	c := &conn{
		slots: make(chan struct{}, p.cfg.MaxInFlight),
		dead:  make(chan struct{}),
	}
	logger := p.logger
	opts := append([]nats.Option{
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			logger.Warn("nats: asynchronous error from the server", "err", err) // a permissions violation, say
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			c.markDead()
			if err := nc.LastError(); err != nil {
				logger.Warn("nats: connection lost", "err", err)
			}
		}),
	}, p.opts...)
	nc, err := nats.Connect(strings.Join(p.cfg.URLs, ","), opts...)
	if err != nil {
		return nil, &connectError{err}
	}
	c.nc = nc
	c.maxPayload = nc.MaxPayload()
	free := func() {
		select {
		case <-c.slots:
		default: // never: each sent message holds a slot until here
		}
	}
	c.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(p.cfg.MaxInFlight),
		jetstream.WithPublishAsyncTimeout(p.cfg.PublishTimeout),
		jetstream.WithDefaultTimeout(p.cfg.PublishTimeout),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) { free() }),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { free() }),
	)
	if err != nil {
		c.close()
		return nil, &connectError{err}
	}
	logger.Info("nats: connected", "server", nc.ConnectedUrlRedacted(), "server_id", nc.ConnectedServerId(),
		"server_version", nc.ConnectedServerVersion(), "max_payload", c.maxPayload)
	return c, nil
}

// natsOptions are the client options of every connection of cfg.
func natsOptions(cfg Config) []nats.Option {
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.NoReconnect(),
		nats.Timeout(cfg.DialTimeout),
		nats.FlusherTimeout(cfg.PublishTimeout),
	}
	switch {
	case cfg.CredentialsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.CredentialsFile))
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS.Clone()))
	}
	return opts
}

// acquire takes an in-flight slot, waiting within ctx while the connection
// lives.
func (c *conn) acquire(ctx context.Context) error {
	select {
	case c.slots <- struct{}{}:
		return nil
	default:
	}
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.dead:
		return c.lost()
	}
}

// release frees a slot taken for a message that was not sent after all.
func (c *conn) release() {
	select {
	case <-c.slots:
	default:
	}
}

func (c *conn) markDead() { c.deadOnce.Do(func() { close(c.dead) }) }

// isDead reports whether the connection has closed.
func (c *conn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return c.nc.IsClosed()
	}
}

// lost is the error of the messages a dead connection did not get
// acknowledged: ErrConnectionLost, with the client's last error.
func (c *conn) lost() error {
	if err := c.nc.LastError(); err != nil {
		return fmt.Errorf("%w: %w", ErrConnectionLost, err)
	}
	return ErrConnectionLost
}

// close closes the connection, waiting at most closeWait.
func (c *conn) close() {
	done := make(chan struct{})
	go func() {
		c.nc.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeWait):
	}
	c.markDead()
}

// drop closes c and forgets it, so that the next call dials afresh.
func (p *Publisher) drop(c *conn) {
	p.mu.Lock()
	if p.cur == c {
		p.cur = nil
	}
	p.mu.Unlock()
	c.close()
}
