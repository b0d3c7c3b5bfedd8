package mqttsink

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// conn is one MQTT connection: its client, and dead, closed once it is
// lost (with the reason in err).
type conn struct {
	c    *paho.Client
	dead chan struct{}
	once sync.Once
	err  error
}

// lose marks c lost for reason; the first reason is kept.
func (c *conn) lose(reason error) {
	c.once.Do(func() {
		c.err = reason
		close(c.dead)
	})
}

func (c *conn) lost() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// deadlineConn bounds each write, so that a write to a broker that reads
// nothing fails instead of blocking the client for good.
type deadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (d deadlineConn) Write(b []byte) (int, error) {
	_ = d.Conn.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.Conn.Write(b)
}

// dial connects to the broker: TCP, then CONNECT with a clean start, and
// waits for a CONNACK that accepts, within ctx and Config.PublishTimeout.
func dial(ctx context.Context, cfg Config, addr string) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.PublishTimeout)
	defer cancel()
	nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	c := &conn{dead: make(chan struct{})}
	c.c = paho.NewClient(paho.ClientConfig{
		ClientID:      cfg.ClientID,
		Conn:          packets.NewThreadSafeConn(deadlineConn{nc, cfg.PublishTimeout}), // publishes run in parallel
		PacketTimeout: cfg.PublishTimeout,
		OnClientError: func(err error) { c.lose(fmt.Errorf("connection lost: %w", err)) },
		OnServerDisconnect: func(d *paho.Disconnect) {
			c.lose(fmt.Errorf("disconnected by the broker (reason 0x%02x)", d.ReasonCode))
		},
	})
	ack, err := c.c.Connect(ctx, &paho.Connect{
		ClientID: cfg.ClientID, CleanStart: true, KeepAlive: 30,
		Username: cfg.Username, UsernameFlag: cfg.Username != "",
		Password: []byte(cfg.Password), PasswordFlag: cfg.Password != "",
	})
	if err != nil {
		_ = nc.Close()
		if ack != nil && ack.ReasonCode >= 0x80 {
			return nil, fmt.Errorf("connection refused by %s (reason 0x%02x %s)", addr, ack.ReasonCode, ack.Properties.ReasonString)
		}
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	go func() {
		<-c.c.Done() // the client stopped: an error, or Close
		c.lose(fmt.Errorf("connection to %s closed", addr))
	}()
	return c, nil
}

// close disconnects politely and stops the client.
func (c *conn) close() {
	_ = c.c.Disconnect(&paho.Disconnect{ReasonCode: 0})
	c.lose(ErrClosed)
}
