package rabbitmq

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/internal/sinknet"
)

// closeTimeout bounds the graceful close of the connection in Close.
const closeTimeout = time.Second

// maxIdleChannels is the most open channels the publisher keeps for later
// Publish calls; more are closed when handed back.
const maxIdleChannels = 64

// link is one AMQP connection and the TCP socket under it.
type link struct {
	conn *amqp.Connection
	// raw is the TCP connection (under TLS, when used), closed by abort.
	raw net.Conn
}

// alive reports whether the connection is still open.
func (l *link) alive() bool { return !l.conn.IsClosed() }

// abort breaks the connection at once: every read and write blocked on it
// fails, which shuts the connection and its channels down.
func (l *link) abort() { _ = l.raw.Close() }

// close closes the connection gracefully, within closeTimeout.
func (l *link) close() { _ = l.conn.CloseDeadline(time.Now().Add(closeTimeout)) }

// channel is an open channel in confirm mode with its notifications. One
// Publish call uses it at a time.
type channel struct {
	link    *link
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
	// reason is why the channel closed, once known (see closeReason).
	reason *amqp.Error
}

// usable reports whether c is open, on a connection that is.
func (c *channel) usable() bool { return !c.ch.IsClosed() && c.link.alive() }

// closeReason returns the error the channel was closed with: the broker's
// reply for a channel error (404, 406, ...), or the connection's error; nil
// while it is open, or when this client closed it. The reason is
// delivered as the channel shuts down, which amqp091-go completes at once
// once the channel is marked closed.
func (c *channel) closeReason() *amqp.Error {
	if c.reason == nil && c.ch.IsClosed() {
		if e, ok := <-c.closes; ok {
			c.reason = e
		}
	}
	return c.reason
}

// discard closes c in the background: the close waits for the broker's
// answer, or for the connection to end.
func (c *channel) discard() {
	go func() { _ = c.ch.Close() }()
}

// connection returns the open connection, dialing it first when there is
// none or it closed. Only one caller dials at a time; the others wait for
// it, each within its own ctx.
func (p *Publisher) connection(ctx context.Context) (*link, error) {
	if l := p.current(); l != nil {
		return l, nil
	}
	select {
	case p.dialing <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("rabbitmq: waiting to connect: %w", ctx.Err())
	}
	defer func() { <-p.dialing }()
	if l := p.current(); l != nil { // another caller dialed meanwhile
		return l, nil
	}
	if p.closed.Load() {
		return nil, ErrClosed
	}
	l, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed.Load() { // Close came during the dial
		p.mu.Unlock()
		l.close()
		return nil, ErrClosed
	}
	p.link, p.idle = l, nil // the old link's channels closed with it
	p.mu.Unlock()
	return l, nil
}

// current returns the open connection, or nil.
func (p *Publisher) current() *link {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.link != nil && p.link.alive() {
		return p.link
	}
	return nil
}

// dial opens a connection within ctx and DialTimeout. Its errors are
// marked unavailable (or are ctx's); none holds the password.
func (p *Publisher) dial(ctx context.Context) (*link, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	var (
		raw  net.Conn
		stop func() bool
	)
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("outboxrelay")
	cfg := amqp.Config{
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bounds the TLS and AMQP handshakes; amqp091-go clears it once
			// the connection is open.
			deadline, _ := ctx.Deadline()
			if err := c.SetDeadline(deadline); err != nil {
				c.Close()
				return nil, err
			}
			raw = c
			// A cancellation during the handshakes breaks them at once.
			stop = context.AfterFunc(ctx, func() { c.Close() })
			return c, nil
		},
	}
	if p.cfg.TLS != nil {
		cfg.TLSClientConfig = p.cfg.TLS.Clone() // DialConfig may set its ServerName
	}
	conn, err := amqp.DialConfig(p.cfg.URL, cfg)
	if stop != nil && !stop() && err == nil {
		// ctx ended just as the handshake completed: the socket is closed.
		err = ctx.Err()
	}
	if err != nil {
		if raw != nil {
			raw.Close()
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr // what broke the handshake
		}
		return nil, publishers.Unavailable(fmt.Errorf("rabbitmq: connect to %s: %w", redactURL(p.cfg.URL), err))
	}
	l := &link{conn: conn, raw: raw}
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	logger := p.cfg.Logger
	go func() {
		if e, ok := <-closes; ok && e != nil && logger != nil {
			logger.Warn("rabbitmq connection closed", slog.String("url", redactURL(p.cfg.URL)), slog.Any("error", e))
		}
	}()
	return l, nil
}

// acquire returns an open channel in confirm mode for one Publish call: an
// idle one, or a new one (on a new connection if needed), within ctx.
func (p *Publisher) acquire(ctx context.Context) (*channel, error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if c.usable() && c.link == p.link {
			p.mu.Unlock()
			return c, nil
		}
		c.discard()
	}
	p.mu.Unlock()
	return p.newChannel(ctx)
}

// newChannel opens a channel on the connection, dialing it if needed. A
// connection can be dead before it shows as closed (amqp091-go shuts it
// down in the background after a failed write): when opening the channel
// finds it so, newChannel tries once more, on a new connection.
func (p *Publisher) newChannel(ctx context.Context) (*channel, error) {
	for retried := false; ; retried = true {
		l, err := p.connection(ctx)
		if err != nil {
			return nil, err
		}
		c, err := p.openChannel(ctx, l)
		if err == nil || retried || ctx.Err() != nil {
			return c, err
		}
		if l.alive() && !sinknet.IsNetworkError(err) {
			return c, err
		}
		// The write failed or the connection closed: it is dead, whether
		// or not amqp091-go has noticed yet. Drop it and dial afresh.
		p.drop(l)
	}
}

// drop forgets l, if it is the publisher's connection, and breaks it off:
// the next caller dials a new one.
func (p *Publisher) drop(l *link) {
	p.mu.Lock()
	if p.link == l {
		p.link, p.idle = nil, nil
	}
	p.mu.Unlock()
	l.abort()
}

// release hands c back for later calls when it is clean (every message
// sent on it was confirmed, its returns read) and open; it is closed
// otherwise.
func (p *Publisher) release(c *channel, clean bool) {
	if clean && c.usable() {
		p.mu.Lock()
		if c.link == p.link && len(p.idle) < maxIdleChannels && !p.closed.Load() {
			p.idle = append(p.idle, c)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	c.discard()
}

// openChannel opens a channel on l and puts it in confirm mode, within
// ctx. When ctx ends first, the channel is closed once it is open.
func (p *Publisher) openChannel(ctx context.Context, l *link) (*channel, error) {
	var c *channel
	err := callCtx(ctx, func() error {
		ch, err := l.conn.Channel()
		if err != nil {
			return err
		}
		c = &channel{
			link:    l,
			ch:      ch,
			returns: ch.NotifyReturn(make(chan amqp.Return, p.cfg.MaxInFlight)),
			closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			c = nil
			return err
		}
		return nil
	}, func() {
		if c != nil {
			c.discard()
		}
	})
	if err != nil {
		return nil, l.lost(fmt.Errorf("rabbitmq: open channel: %w", err))
	}
	return c, nil
}

// lost wraps err in ErrConnectionLost when l has closed, so that the
// failure shows as the broker's, not the message's.
func (l *link) lost(err error) error {
	if l.alive() {
		return err
	}
	return fmt.Errorf("%w: %w", ErrConnectionLost, err)
}

// callCtx runs f, which waits for the broker (a synchronous AMQP method,
// which amqp091-go cannot interrupt), and returns its error; or ctx's
// error when ctx ends first. f then goes on in the background, and
// abandoned runs once it has returned. The background run ends with the
// broker's answer or with the connection.
func callCtx(ctx context.Context, f func() error, abandoned func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		go func() {
			<-done
			abandoned()
		}()
		return ctx.Err()
	}
}
