package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// chunkSize is the most a pump reads, holds at the gate and writes at once.
const chunkSize = 32 << 10

// link is one proxied connection: a client and its own upstream connection.
type link struct {
	client, server net.Conn
	once           sync.Once
}

// close closes both sides once; with hard, it resets them (RST) instead of
// closing them gracefully (FIN).
func (l *link) close(hard bool) {
	l.once.Do(func() {
		if hard {
			reset(l.client)
			reset(l.server)
			return
		}
		l.client.Close()
		l.server.Close()
	})
}

// pump copies src to dst one chunk at a time, each passing the gate between
// its read and its write; being the only reader of src and writer of dst, it
// keeps the order. On EOF it half-closes dst so the peer sees the end of
// input while the other direction goes on; on any other failure, or when the
// gate refuses, it resets the whole link.
func (p *Proxy) pump(l *link, src, dst net.Conn, count *atomic.Int64) {
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate(time.Now()) {
				l.close(true)
				return
			}
			w, werr := dst.Write(buf[:n])
			count.Add(int64(w))
			if werr != nil {
				l.close(true)
				return
			}
		}
		if errors.Is(err, io.EOF) {
			if cerr := closeWrite(dst); cerr != nil {
				l.close(true)
			}
			return
		}
		if err != nil {
			l.close(true)
			return
		}
	}
}

// closeWrite shuts down the writing side of c, or closes c if it cannot.
func closeWrite(c net.Conn) error {
	if tc, ok := c.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return c.Close()
}

// reset closes c so that its peer gets a connection reset (RST) rather than
// an orderly end of stream.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0) //nolint:errcheck // best effort; Close follows regardless
	}
	c.Close()
}
