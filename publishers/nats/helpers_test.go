package natssink_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
)

// serverURL is the NATS server with JetStream the tests use:
// OUTBOX_TEST_NATS_URL, or the one on this machine.
func serverURL() string {
	if u := os.Getenv("OUTBOX_TEST_NATS_URL"); u != "" {
		return u
	}
	return natssink.DefaultURL
}

// serverAddr is serverURL as host:port, for a fault proxy.
func serverAddr(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(serverURL())
	if err != nil || u.Port() == "" {
		t.Fatalf("OUTBOX_TEST_NATS_URL %q is not nats://host:port", serverURL())
	}
	return u.Host
}

// client is the tests' own connection to a server, to create streams and
// read them back.
type client struct {
	nc *nats.Conn
	js jetstream.JetStream
	// keepStreams leaves the streams newStream creates in place when the
	// test ends: set for a private server, which goes with its streams.
	keepStreams bool
}

// connect connects to url, failing t with how to start a server when none
// answers. The connection is closed when t ends.
func connect(t testing.TB, url string) *client {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("no NATS server at %s (%v): start one with JetStream, e.g. `nats-server -js -a 127.0.0.1 -p 4222 -sd /tmp/nats`, or set OUTBOX_TEST_NATS_URL", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(testCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("the NATS server at %s has no JetStream (%v): start it with -js", url, err)
	}
	return &client{nc: nc, js: js}
}

var seq atomic.Int64

// newStream creates a stream capturing one fresh subject, deleted when t
// ends, and returns the subject and the stream's name. edit, when not nil,
// adjusts the configuration first.
func (c *client) newStream(t testing.TB, prefix string, edit func(*jetstream.StreamConfig)) (subject, stream string) {
	t.Helper()
	n := seq.Add(1)
	tag := uuid.NewString()[:8]
	subject = fmt.Sprintf("outboxtest.%s.%d.%s", prefix, n, tag)
	stream = fmt.Sprintf("OUTBOXTEST_%s_%d_%s", prefix, n, tag)
	cfg := jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.FileStorage}
	if edit != nil {
		edit(&cfg)
	}
	// nats-server 2.9 can fail a create with 10049 ("could not create
	// storage directory") while another client deletes the account's last
	// stream, which removes the directory: try again.
	const storeCreateFailed = 10049
	for attempt := 1; ; attempt++ {
		_, err := c.js.CreateStream(testCtx(t, 10*time.Second), cfg)
		if err == nil {
			break
		}
		var api *jetstream.APIError
		if attempt == 5 || !errors.As(err, &api) || api.ErrorCode != storeCreateFailed {
			t.Fatalf("create stream %s: %v", stream, err)
		}
	}
	if c.keepStreams {
		return subject, stream
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.js.DeleteStream(ctx, stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("delete stream %s: %v", stream, err)
		}
	})
	return subject, stream
}

// unboundSubject returns a subject no stream captures.
func unboundSubject() string {
	return fmt.Sprintf("outboxtest.nostream.%d.%s", seq.Add(1), uuid.NewString()[:8])
}

// read returns every message of stream, in stream order, with an ordered
// consumer.
func (c *client) read(t testing.TB, stream string) []jetstream.Msg {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s info: %v", stream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		t.Fatalf("ordered consumer on %s: %v", stream, err)
	}
	var out []jetstream.Msg
	for reached := uint64(0); reached < last; {
		batch, err := cons.Fetch(int(min(500, info.State.Msgs-uint64(len(out)))), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("fetch from %s: %v", stream, err)
		}
		got := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				t.Fatalf("metadata of a message of %s: %v", stream, err)
			}
			reached = meta.Sequence.Stream
			out = append(out, m)
			got++
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("fetch from %s: %v", stream, err)
		}
		if got == 0 {
			t.Fatalf("fetch from %s: nothing after sequence %d of %d", stream, reached, last)
		}
	}
	return out
}

// newPublisher returns a publisher closed at the end of the test.
func newPublisher(t testing.TB, cfg natssink.Config) *natssink.Publisher {
	t.Helper()
	p, err := natssink.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// testCtx returns a context that ends with the test or after d.
func testCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newMsg returns a message with a fresh id; key "" means a nil key.
func newMsg(subject, key, payload string) outbox.Message {
	m := outbox.Message{ID: uuid.New(), Topic: subject, Payload: []byte(payload)}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}

// perMessage expands a Publish result into one error per message.
func perMessage(t testing.TB, err error, n int) []error {
	t.Helper()
	var each publishers.Errors
	if errors.As(err, &each) && len(each) != n {
		t.Fatalf("publishers.Errors of length %d for %d messages", len(each), n)
	}
	return publishers.PerMessage(err, n)
}

// freePort returns a loopback port nothing listens on.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// server is a private nats-server process a test started.
type server struct {
	URL  string
	port int
	dir  string // its JetStream store
	args []string
	cmd  *exec.Cmd
}

// startServer starts a private nats-server on a free loopback port with
// args (e.g. "-js"), its store in a temporary directory, stopped when t
// ends, on another port if something took the first before the server
// bound it (a client's connection elsewhere on a busy machine may). It
// fails t when the binary is missing, saying how to install it.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	if _, err := exec.LookPath("nats-server"); err != nil {
		t.Fatalf("nats-server is not installed (%v): install it (apt-get install nats-server, or go install github.com/nats-io/nats-server/v2@latest)", err)
	}
	s := &server{dir: t.TempDir(), args: args}
	t.Cleanup(s.stop)
	for range 5 {
		s.port = freePort(t)
		s.URL = "nats://127.0.0.1:" + strconv.Itoa(s.port)
		if s.run(t) {
			return s
		}
	}
	t.Fatal("nats-server found its port taken five times")
	return nil
}

// start runs the server again on its port, as after stop.
func (s *server) start(t testing.TB) {
	t.Helper()
	if !s.run(t) {
		t.Fatalf("nats-server exited before it was ready on port %d", s.port)
	}
}

// run runs the server on s.port and waits until it says it is ready. It
// returns false, the server gone, when the server exited first: its port
// was taken, and a dial would have reached whatever took it.
func (s *server) run(t testing.TB) bool {
	t.Helper()
	args := append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-sd", s.dir}, s.args...)
	s.cmd = exec.Command("nats-server", args...)
	logs, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	ready, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(logs)
		for said := false; sc.Scan(); {
			if !said && strings.Contains(sc.Text(), "Server is ready") {
				said = true
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
		return true
	case <-exited:
		s.stop()
		return false
	case <-time.After(time.Minute):
		s.stop()
		t.Fatalf("nats-server %v is not ready after a minute", args)
		return false
	}
}

// stop kills the server and waits for it to exit.
func (s *server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// A server whose port is taken says so instead of passing the dial that
// reaches whatever took it: startServer then moves to another port.
func TestPrivateServerSeesItsPortTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := &server{port: l.Addr().(*net.TCPAddr).Port, dir: t.TempDir()}
	t.Cleanup(s.stop)
	if s.run(t) {
		t.Fatalf("nats-server reported ready on port %d, which a listener holds", s.port)
	}
}
