package faultproxy_test

import (
	"bytes"
	crand "crypto/rand"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
)

// Tests run one at a time: TestCloseWithOpenConnections counts every proxy
// goroutine in the binary.

// wait bounds every read and write that must succeed: a safety net, a
// minute for a busy machine.
const wait = time.Minute

// startEcho starts a TCP server on loopback that writes back whatever it
// reads, until t ends.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// start starts a proxy in front of upstream, closed when t ends.
func start(t *testing.T, upstream string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(upstream)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func dial(t *testing.T, p *faultproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), wait)
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back, failing t on any error.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if string(got) != msg {
		t.Fatalf("echoed %q, want %q", got, msg)
	}
}

// echoBack sends data through c from another goroutine while reading the
// echo, and returns what came back and the first error.
func echoBack(c net.Conn, data []byte, chunks *rand.Rand) ([]byte, error) {
	if err := c.SetDeadline(time.Now().Add(wait)); err != nil {
		return nil, err
	}
	werr := make(chan error, 1)
	go func() {
		for rest := data; len(rest) > 0; {
			n := len(rest)
			if chunks != nil {
				n = min(n, 1+chunks.IntN(8<<10))
			}
			if _, err := c.Write(rest[:n]); err != nil {
				werr <- err
				return
			}
			rest = rest[n:]
		}
		werr <- nil
	}()
	got := make([]byte, len(data))
	_, rerr := io.ReadFull(c, got)
	if err := <-werr; err != nil {
		return got, err
	}
	return got, rerr
}

// mustRefuse asserts that a new connection cannot exchange data: dialing
// fails, or the proxy closes or resets the connection once dialed. (A reset
// can arrive before the dial has returned.)
func mustRefuse(t *testing.T, p *faultproxy.Proxy, what string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), wait)
	if err != nil {
		return
	}
	defer c.Close()
	_, _ = io.WriteString(c, "ping")
	mustFail(t, c, what)
}

// mustFail asserts that reading c ends in an error other than the deadline:
// the proxy closed or reset it.
func mustFail(t *testing.T, c net.Conn, what string) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read = %v, want a closed or reset connection", what, err)
	}
}

// mustWait asserts that nothing arrives on c for a short while.
func mustWait(t *testing.T, c net.Conn, what string) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read = %d bytes, %v; want nothing before the deadline", what, n, err)
	}
}

func TestPassThrough(t *testing.T) {
	p := start(t, startEcho(t))
	c := dial(t, p)

	data := make([]byte, 4<<20)
	crand.Read(data)
	got, err := echoBack(c, data, nil)
	if err != nil {
		t.Fatalf("echo: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("echoed stream differs from the one sent")
	}
	if p.Mode() != "pass" {
		t.Errorf("Mode = %q, want pass", p.Mode())
	}
	if err := p.Close(); err != nil { // settles the byte counts
		t.Fatalf("Close: %v", err)
	}
	s := p.Stats()
	if s.Accepted != 1 || s.BytesUp != int64(len(data)) || s.BytesDown != int64(len(data)) {
		t.Errorf("Stats = %+v, want 1 accepted and %d bytes each way", s, len(data))
	}
}

func TestCut(t *testing.T) {
	p := start(t, startEcho(t))
	open := dial(t, p)
	roundTrip(t, open, "before")

	p.Cut()
	if p.Mode() != "cut" {
		t.Errorf("Mode = %q, want cut", p.Mode())
	}
	mustFail(t, open, "open connection after Cut")

	mustRefuse(t, p, "new connection while cut")

	p.Heal()
	roundTrip(t, dial(t, p), "after")

	s := p.Stats()
	if s.Cut != 1 || s.Refused != 1 || s.Accepted != 3 {
		t.Errorf("Stats = %+v, want 3 accepted, 1 cut, 1 refused", s)
	}
}

func TestStall(t *testing.T) {
	p := start(t, startEcho(t))
	open := dial(t, p)
	roundTrip(t, open, "before")

	p.Stall()
	if p.Mode() != "stall" {
		t.Errorf("Mode = %q, want stall", p.Mode())
	}
	if _, err := io.WriteString(open, "during"); err != nil {
		t.Fatalf("write: %v", err)
	}
	mustWait(t, open, "open connection while stalled")
	fresh := dial(t, p)
	if _, err := io.WriteString(fresh, "fresh"); err != nil {
		t.Fatalf("write: %v", err)
	}
	mustWait(t, fresh, "new connection while stalled")

	p.Heal()
	for c, want := range map[net.Conn]string{open: "during", fresh: "fresh"} {
		if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("read after Heal: %v", err)
		}
		if string(got) != want {
			t.Fatalf("after Heal got %q, want %q", got, want)
		}
	}
	roundTrip(t, open, "after")
}

func TestCutWhileStalledOrSlow(t *testing.T) {
	for name, fault := range map[string]func(*faultproxy.Proxy){
		"stall": (*faultproxy.Proxy).Stall,
		"slow":  func(p *faultproxy.Proxy) { p.Slow(time.Hour) },
	} {
		t.Run(name, func(t *testing.T) {
			p := start(t, startEcho(t))
			c := dial(t, p)
			roundTrip(t, c, "before")
			fault(p)
			if _, err := io.WriteString(c, "held"); err != nil {
				t.Fatalf("write: %v", err)
			}
			mustWait(t, c, "held chunk")
			p.Cut()
			mustFail(t, c, "open connection after Cut")
			mustRefuse(t, p, "new connection after Cut")
			p.Heal()
			roundTrip(t, dial(t, p), "after")
			if s := p.Stats(); s.Cut != 1 || s.Refused != 1 {
				t.Errorf("Stats = %+v, want 1 cut, 1 refused", s)
			}
		})
	}
}

func TestSlow(t *testing.T) {
	// A healed round trip must take less than d: 1s, which a busy
	// machine's loopback does not come near.
	const d = time.Second
	p := start(t, startEcho(t))
	c := dial(t, p)
	rtt := func() time.Duration {
		t.Helper()
		begin := time.Now()
		roundTrip(t, c, "x")
		return time.Since(begin)
	}

	p.Slow(d)
	if p.Mode() != "slow" {
		t.Errorf("Mode = %q, want slow", p.Mode())
	}
	if got := rtt(); got < d {
		t.Errorf("round trip while slow took %v, want at least %v", got, d)
	}
	p.Heal()
	if got := rtt(); got >= d {
		t.Errorf("round trip after Heal took %v, want under %v", got, d)
	}
}

func TestDialFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close() // nothing listens there now

	p := start(t, gone)
	mustRefuse(t, p, "connection to an unreachable upstream")
	if s := p.Stats(); s.DialFailed != 1 {
		t.Errorf("Stats = %+v, want 1 failed dial", s)
	}
}

func TestCloseWithOpenConnections(t *testing.T) {
	p, err := faultproxy.Start(startEcho(t))
	if err != nil {
		t.Fatal(err)
	}
	idle := dial(t, p)
	roundTrip(t, idle, "idle")
	slow := dial(t, p)
	roundTrip(t, slow, "slow")
	p.Slow(time.Hour)
	if _, err := io.WriteString(slow, "held"); err != nil {
		t.Fatal(err)
	}
	p.Stall()
	stalled := dial(t, p)
	if _, err := io.WriteString(stalled, "held"); err != nil {
		t.Fatal(err)
	}
	mustWait(t, stalled, "stalled connection")

	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("Close did not return")
	}
	for _, c := range []net.Conn{idle, slow, stalled} {
		mustFail(t, c, "connection after Close")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), wait); err == nil {
		t.Error("dial after Close succeeded")
	}
	// Close waited for every goroutine, but one may still be unwinding
	// past its WaitGroup.Done.
	deadline := time.Now().Add(time.Minute)
	for {
		left := proxyGoroutines()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines outlived Close:\n\n%s", strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond) // polling the runtime; nothing to wait on
	}
}

// proxyGoroutines returns the stacks of the faultproxy package's goroutines.
func proxyGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, proxyGoroutine) {
			found = append(found, g)
		}
	}
	return found
}

// Switching between pass, slow and stall at random while several
// connections stream must leave every stream byte-exact.
func TestModeSwitchingUnderTraffic(t *testing.T) {
	const (
		conns = 8
		size  = 512 << 10
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	p := start(t, startEcho(t))
	var cs []net.Conn
	for range conns {
		cs = append(cs, dial(t, p))
	}

	done := make(chan struct{})
	switched := make(chan int)
	go func() {
		r := rand.New(rand.NewPCG(seed, 0))
		n := 0
		defer func() { switched <- n }()
		for {
			switch r.IntN(3) {
			case 0:
				p.Heal()
			case 1:
				p.Slow(time.Duration(1+r.IntN(3)) * time.Millisecond)
			case 2:
				p.Stall()
			}
			n++
			select {
			case <-done:
				p.Heal()
				return
			case <-time.After(time.Duration(r.IntN(3000)) * time.Microsecond): // the schedule itself
			}
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i, c := range cs {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(i+1)))
			data := make([]byte, size)
			for j := range data {
				data[j] = byte(r.Uint32())
			}
			got, err := echoBack(c, data, r)
			switch {
			case err != nil:
				errs <- err
			case !bytes.Equal(got, data):
				errs <- errors.New("echoed stream differs from the one sent")
			}
		})
	}
	wg.Wait()
	close(done)
	t.Logf("%d mode switches", <-switched)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := p.Close(); err != nil { // settles the byte counts
		t.Fatalf("Close: %v", err)
	}
	if s := p.Stats(); s.BytesUp != conns*size || s.BytesDown != conns*size {
		t.Errorf("Stats = %+v, want %d bytes each way", s, conns*size)
	}
}
