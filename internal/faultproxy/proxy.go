package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// mode is the fault a Proxy applies to the bytes it forwards.
type mode int

const (
	modePass mode = iota
	modeCut
	modeStall
	modeSlow
)

func (m mode) String() string {
	switch m {
	case modeCut:
		return "cut"
	case modeStall:
		return "stall"
	case modeSlow:
		return "slow"
	default:
		return "pass"
	}
}

// Stats counts what a Proxy has done since Start. A chunk's bytes are
// counted just after they are written, so a peer may read them a moment
// before they show; once Close has returned, the counts are final.
type Stats struct {
	// Accepted is the number of client connections accepted, refused ones
	// included.
	Accepted int64
	// Cut is the number of open connections reset by Cut.
	Cut int64
	// Refused is the number of new connections reset on arrival because the
	// proxy was cut.
	Refused int64
	// DialFailed is the number of client connections closed because the
	// upstream could not be dialed.
	DialFailed int64
	// BytesUp is the number of bytes forwarded from clients to the upstream.
	BytesUp int64
	// BytesDown is the number of bytes forwarded from the upstream to clients.
	BytesDown int64
}

// Proxy forwards every TCP connection accepted on a loopback address to one
// upstream address, applying the current fault mode. It starts in pass mode.
// All methods are safe for concurrent use.
type Proxy struct {
	upstream string
	ln       net.Listener
	ctx      context.Context // canceled by Close; aborts upstream dials
	cancel   context.CancelFunc
	wg       sync.WaitGroup // the accept loop and every connection goroutine

	mu      sync.Mutex
	mode    mode
	delay   time.Duration // in modeSlow
	changed chan struct{} // closed and replaced on every mode change
	links   map[*link]struct{}
	closed  bool

	accepted, cut, refused, dialFailed, bytesUp, bytesDown atomic.Int64
}

// Start listens on 127.0.0.1:0 and forwards each accepted connection to
// upstream (host:port), dialed anew for each. It returns once the listener is
// open; Close releases it.
func Start(upstream string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, fmt.Errorf("faultproxy: upstream %q: %w", upstream, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		upstream: upstream,
		ln:       ln,
		ctx:      ctx,
		cancel:   cancel,
		changed:  make(chan struct{}),
		links:    make(map[*link]struct{}),
	}
	p.wg.Go(p.acceptLoop)
	return p, nil
}

// Addr returns the host:port clients dial to reach the upstream through the
// proxy.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut makes the upstream unreachable: it resets every open connection on
// both sides at once (RST, not FIN) and resets new connections as soon as
// they are accepted, until Heal, Stall or Slow.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(modeCut, 0)
	for l := range p.links {
		delete(p.links, l)
		l.close(true)
		p.cut.Add(1)
	}
}

// Stall keeps connections open but forwards nothing in either direction
// until Heal or Slow; new connections are accepted and wait likewise. No
// byte is lost: what clients and the upstream send meanwhile waits in the
// proxy and in socket buffers, and flows on in order once the stall ends.
// Bytes already being written when Stall is called may still arrive.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(modeStall, 0)
}

// Slow forwards everything but holds each chunk read, in each direction, for
// d before writing it, so a request/response round trip takes at least 2*d
// longer. Order is kept. Slow with d <= 0 is Heal.
func (p *Proxy) Slow(d time.Duration) {
	if d <= 0 {
		p.Heal()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(modeSlow, d)
}

// Heal returns to plain forwarding: stalled bytes flow on, and new
// connections are no longer refused. Connections reset by Cut stay closed.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(modePass, 0)
}

// Mode returns the current mode for logs: "pass", "cut", "stall" or "slow".
func (p *Proxy) Mode() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode.String()
}

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted:   p.accepted.Load(),
		Cut:        p.cut.Load(),
		Refused:    p.refused.Load(),
		DialFailed: p.dialFailed.Load(),
		BytesUp:    p.bytesUp.Load(),
		BytesDown:  p.bytesDown.Load(),
	}
}

// Close stops listening, closes every connection, stalled ones included, and
// blocks until all the proxy's goroutines have returned. It is idempotent:
// later calls wait likewise and return nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	close(p.changed) // wake chunks waiting at the gate; they see closed
	p.changed = make(chan struct{})
	for l := range p.links {
		delete(p.links, l)
		l.close(false)
	}
	p.mu.Unlock()

	p.cancel()
	err := p.ln.Close()
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("faultproxy: close listener: %w", err)
	}
	return nil
}

// setLocked switches mode and wakes every chunk waiting at the gate so it
// re-reads the mode. p.mu must be held.
func (p *Proxy) setLocked(m mode, d time.Duration) {
	p.mode, p.delay = m, d
	close(p.changed)
	p.changed = make(chan struct{})
}

// gate blocks until a chunk read at readAt may be written on, as the mode
// (changing meanwhile) allows. It reports false when the chunk's connection
// must close instead: the proxy was cut or closed.
func (p *Proxy) gate(readAt time.Time) bool {
	for {
		p.mu.Lock()
		m, d, changed, closed := p.mode, p.delay, p.changed, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		switch m {
		case modePass:
			return true
		case modeCut:
			return false
		case modeStall:
			<-changed
		case modeSlow:
			rest := time.Until(readAt.Add(d))
			if rest <= 0 {
				return true
			}
			t := time.NewTimer(rest)
			select {
			case <-t.C:
			case <-changed:
				t.Stop()
			}
		}
	}
}

// acceptLoop accepts connections until Close, refusing them while cut and
// serving each in its own goroutine otherwise.
func (p *Proxy) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient, such as running out of file descriptors: back off
			// as net/http does rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		p.accepted.Add(1)
		p.mu.Lock()
		m, closed := p.mode, p.closed
		p.mu.Unlock()
		switch {
		case closed:
			c.Close()
		case m == modeCut:
			p.refused.Add(1)
			reset(c)
		default:
			p.wg.Go(func() { p.serve(c) })
		}
	}
}

// serve dials the upstream for client and forwards both ways until both
// directions end or the link is closed.
func (p *Proxy) serve(client net.Conn) {
	var d net.Dialer
	server, err := d.DialContext(p.ctx, "tcp", p.upstream)
	if err != nil {
		p.dialFailed.Add(1)
		reset(client)
		return
	}
	l := &link{client: client, server: server}
	if !p.register(l) {
		l.close(true)
		return
	}
	defer p.unregister(l)

	done := make(chan struct{})
	p.wg.Go(func() {
		defer close(done)
		p.pump(l, server, client, &p.bytesDown)
	})
	p.pump(l, client, server, &p.bytesUp)
	<-done
	l.close(false)
}

// register records l so Cut and Close reach it. It reports false, counting
// a refusal, if the proxy was cut or closed while l's upstream was dialed.
func (p *Proxy) register(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.mode == modeCut {
		p.refused.Add(1)
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) unregister(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.links, l)
}
