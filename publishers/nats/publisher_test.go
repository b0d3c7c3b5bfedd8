package natssink_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
)

// An event published twice (a retry after an unknown outcome, a relay that
// lost its lease) is stored once: the sink sets Nats-Msg-Id to the event
// id, the stream drops the second copy within its duplicate window and
// acknowledges it as a duplicate, which Publish counts as acknowledged.
func TestDuplicateEventIsStoredOnce(t *testing.T) {
	t.Parallel()
	c := connect(t, serverURL())
	subject, stream := c.newStream(t, "dup", nil)
	var logs syncbuf.Buffer
	p := newPublisher(t, natssink.Config{
		URLs:   []string{serverURL()},
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	first := newMsg(subject, "k", "first attempt")
	again := first
	again.Payload = []byte("second attempt, same event")
	for i, m := range []outbox.Message{first, again} {
		if err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{m}); err != nil {
			t.Fatalf("Publish %d: %v", i+1, err)
		}
	}
	msgs := c.read(t, stream)
	if len(msgs) != 1 {
		t.Fatalf("the stream holds %d messages, want 1", len(msgs))
	}
	if got := string(msgs[0].Data()); got != "first attempt" {
		t.Errorf("the stream holds %q, want the first copy", got)
	}
	if !strings.Contains(logs.String(), "duplicate") || !strings.Contains(logs.String(), first.ID.String()) {
		t.Errorf("no Debug line about the duplicate of event %s:\n%s", first.ID, logs.String())
	}

	// What the sink relies on, with the bare client: the same Nats-Msg-Id
	// again is acknowledged as a duplicate and not stored.
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, first.ID.String())
	m.Data = []byte("third copy")
	ack, err := c.js.PublishMsg(testCtx(t, 10*time.Second), m)
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Duplicate {
		t.Errorf("PubAck of a third copy: Duplicate = false, want true")
	}
	if n := len(c.read(t, stream)); n != 1 {
		t.Errorf("the stream holds %d messages after a third copy, want 1", n)
	}
}

// A subject no stream captures fails its messages permanently, saying how
// to create a stream, and only them.
func TestSubjectWithoutStreamIsPermanent(t *testing.T) {
	t.Parallel()
	c := connect(t, serverURL())
	good, stream := c.newStream(t, "nostream", nil)
	bad := unboundSubject()
	p := newPublisher(t, natssink.Config{URLs: []string{serverURL()}})
	msgs := []outbox.Message{newMsg(good, "a", "1"), newMsg(bad, "a", "2"), newMsg(good, "b", "3"), newMsg(bad, "", "4")}
	errs := perMessage(t, p.Publish(testCtx(t, 10*time.Second), msgs), len(msgs))
	for i, err := range errs {
		if msgs[i].Topic == good {
			if err != nil {
				t.Errorf("message %d to %s: %v", i, good, err)
			}
			continue
		}
		if publishers.ClassOf(err).String() != "permanent" || !errors.Is(err, natssink.ErrNoStream) {
			t.Errorf("message %d to %s: %s (%v), want permanent ErrNoStream", i, bad, publishers.ClassOf(err).String(), err)
		}
		if err != nil && (!strings.Contains(err.Error(), "nats stream add") || !strings.Contains(err.Error(), bad)) {
			t.Errorf("message %d: %q does not say how to create a stream for %s", i, err, bad)
		}
	}
	if n := len(c.read(t, stream)); n != 2 {
		t.Errorf("%s holds %d messages, want 2", stream, n)
	}
}

// "No responders" from a server whose JetStream is off is not the
// subject's fault: the messages are unavailable, never permanent, and so
// is Probe.
func TestServerWithoutJetStreamIsUnavailable(t *testing.T) {
	t.Parallel()
	s := startServer(t) // no -js
	p := newPublisher(t, natssink.Config{URLs: []string{s.URL}})
	msgs := []outbox.Message{newMsg("orders.created", "k", "1"), newMsg("orders.paid", "", "2")}
	for i, err := range perMessage(t, p.Publish(testCtx(t, 10*time.Second), msgs), len(msgs)) {
		if publishers.ClassOf(err).String() != "unavailable" || !errors.Is(err, natssink.ErrNoJetStream) {
			t.Errorf("message %d: %s (%v), want unavailable ErrNoJetStream", i, publishers.ClassOf(err).String(), err)
		}
	}
	if err := p.Probe(testCtx(t, 10*time.Second)); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Probe = %v (%s), want unavailable", err, publishers.ClassOf(err).String())
	}
}

// Nothing listening: Publish and Probe fail at once as unavailable, long
// before their context ends (20s leaves room for a busy machine).
func TestNoServerIsUnavailable(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	p := newPublisher(t, natssink.Config{URLs: []string{url}})
	start := time.Now()
	err := p.Publish(testCtx(t, time.Minute), []outbox.Message{newMsg("orders", "k", "1")})
	if publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Publish = %v (%s), want unavailable", err, publishers.ClassOf(err).String())
	}
	if err := p.Probe(testCtx(t, time.Minute)); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Probe = %v (%s), want unavailable", err, publishers.ClassOf(err).String())
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("refused connections took %v to report", took)
	}
}

// A server that stops and comes back (its streams kept on disk): the
// messages published while it is down are unavailable, and once it is
// back the same publisher probes and publishes again on a new connection.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	s := startServer(t, "-js")
	c := connect(t, s.URL)
	c.keepStreams = true // they go with the server
	subject, stream := c.newStream(t, "restart", nil)
	p := newPublisher(t, natssink.Config{URLs: []string{s.URL}})
	before := newMsg(subject, "k", "before")
	if err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{before}); err != nil {
		t.Fatalf("Publish before the restart: %v", err)
	}

	s.stop()
	down := []outbox.Message{newMsg(subject, "k", "down 1"), newMsg(subject, "j", "down 2")}
	for i, err := range perMessage(t, p.Publish(testCtx(t, 10*time.Second), down), len(down)) {
		if publishers.ClassOf(err).String() != "unavailable" {
			t.Errorf("message %d while the server is down: %s (%v), want unavailable", i, publishers.ClassOf(err).String(), err)
		}
	}
	if err := p.Probe(testCtx(t, 10*time.Second)); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Probe while the server is down = %v (%s), want unavailable", err, publishers.ClassOf(err).String())
	}

	s.start(t)
	if err := p.Probe(testCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("first Probe after the restart: %v", err)
	}
	after := newMsg(subject, "k", "after")
	if err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{after}); err != nil {
		t.Fatalf("first Publish after the restart: %v", err)
	}
	c = connect(t, s.URL) // the first client's connection died with the server
	var got []string
	for _, m := range c.read(t, stream) {
		got = append(got, string(m.Data()))
	}
	if strings.Join(got, ",") != "before,after" {
		t.Errorf("the stream holds %q, want [before after]", got)
	}
}

// A topic that is not a subject a stream can capture, or a header NATS
// cannot carry intact or reserves, fails its own message permanently; the
// rest of the batch is stored.
func TestMessagesNATSCannotCarryArePermanent(t *testing.T) {
	t.Parallel()
	c := connect(t, serverURL())
	subject, stream := c.newStream(t, "refused", nil)
	p := newPublisher(t, natssink.Config{URLs: []string{serverURL()}})
	withHeader := func(name, value string) outbox.Message {
		m := newMsg(subject, "k", "header "+name)
		m.Headers = map[string]string{name: value}
		return m
	}
	refused := map[string]struct {
		msg  outbox.Message
		want error
	}{
		"empty subject":        {newMsg("", "k", "x"), natssink.ErrInvalidSubject},
		"space":                {newMsg(subject+" x", "k", "x"), natssink.ErrInvalidSubject},
		"wildcard *":           {newMsg(subject+".*", "k", "x"), natssink.ErrInvalidSubject},
		"wildcard >":           {newMsg(subject+".>", "k", "x"), natssink.ErrInvalidSubject},
		"empty token":          {newMsg(strings.Replace(subject, ".", "..", 1), "k", "x"), natssink.ErrInvalidSubject},
		"trailing dot":         {newMsg(subject+".", "k", "x"), natssink.ErrInvalidSubject},
		"API subject":          {newMsg("$JS.API.STREAM.DELETE."+stream, "k", "x"), natssink.ErrInvalidSubject},
		"too long":             {newMsg(subject+"."+strings.Repeat("a", natssink.MaxSubjectLen), "k", "x"), natssink.ErrInvalidSubject},
		"line break in value":  {withHeader("note", "two\nlines"), natssink.ErrInvalidHeader},
		"space around a value": {withHeader("note", " padded"), natssink.ErrInvalidHeader},
		"slash in a name":      {withHeader("a/b", "x"), natssink.ErrInvalidHeader},
		"Nats- header":         {withHeader("Nats-Rollup", "all"), natssink.ErrInvalidHeader},
		"key header":           {withHeader("Outbox-Key", "forged"), natssink.ErrInvalidHeader},
	}
	var msgs, accepted []outbox.Message
	names := map[int]string{}
	for name, r := range refused {
		names[len(msgs)] = name
		msgs = append(msgs, r.msg)
		ok := newMsg(subject, "k", "accepted after "+name)
		msgs = append(msgs, ok)
		accepted = append(accepted, ok)
	}
	errs := perMessage(t, p.Publish(testCtx(t, 10*time.Second), msgs), len(msgs))
	for i, err := range errs {
		name, isRefused := names[i]
		switch {
		case !isRefused && err != nil:
			t.Errorf("message %d (accepted): %v", i, err)
		case isRefused && (publishers.ClassOf(err).String() != "permanent" || !errors.Is(err, refused[name].want)):
			t.Errorf("%s: %s (%v), want permanent %v", name, publishers.ClassOf(err).String(), err, refused[name].want)
		}
	}
	got := c.read(t, stream)
	if len(got) != len(accepted) {
		t.Errorf("the stream holds %d messages, want the %d accepted ones", len(got), len(accepted))
	}
	// Publish refused the API subject before it reached the server.
	if _, err := c.js.Stream(testCtx(t, 10*time.Second), stream); err != nil {
		t.Errorf("stream %s after a message to its delete API subject: %v", stream, err)
	}
}

// The stream's own refusals: a message over the stream's max_msg_size,
// and any message to a sealed stream, are permanent; a full stream that
// discards new messages is transient.
func TestStreamRefusals(t *testing.T) {
	t.Parallel()
	c := connect(t, serverURL())
	p := newPublisher(t, natssink.Config{URLs: []string{serverURL()}})
	t.Run("max_msg_size", func(t *testing.T) {
		t.Parallel()
		subject, stream := c.newStream(t, "maxmsgsize", func(cfg *jetstream.StreamConfig) { cfg.MaxMsgSize = 512 })
		big := newMsg(subject, "k", strings.Repeat("x", 600))
		small := newMsg(subject, "k", "small")
		errs := perMessage(t, p.Publish(testCtx(t, 10*time.Second), []outbox.Message{big, small}), 2)
		if publishers.ClassOf(errs[0]).String() != "permanent" {
			t.Errorf("message over max_msg_size: %s (%v), want permanent", publishers.ClassOf(errs[0]).String(), errs[0])
		}
		if errs[1] != nil {
			t.Errorf("small message: %v", errs[1])
		}
		if n := len(c.read(t, stream)); n != 1 {
			t.Errorf("the stream holds %d messages, want 1", n)
		}
	})
	t.Run("sealed", func(t *testing.T) {
		t.Parallel()
		subject, stream := c.newStream(t, "sealed", nil)
		s, err := c.js.Stream(testCtx(t, 10*time.Second), stream)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.Sealed = true
		if _, err := c.js.UpdateStream(testCtx(t, 10*time.Second), cfg); err != nil {
			t.Fatalf("seal %s: %v", stream, err)
		}
		err = perMessage(t, p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg(subject, "k", "late")}), 1)[0]
		if publishers.ClassOf(err).String() != "permanent" {
			t.Errorf("message to a sealed stream: %s (%v), want permanent", publishers.ClassOf(err).String(), err)
		}
	})
	t.Run("full, discard new", func(t *testing.T) {
		t.Parallel()
		subject, _ := c.newStream(t, "full", func(cfg *jetstream.StreamConfig) {
			cfg.MaxMsgs = 1
			cfg.Discard = jetstream.DiscardNew
		})
		msgs := []outbox.Message{newMsg(subject, "k", "fits"), newMsg(subject, "k", "does not")}
		errs := perMessage(t, p.Publish(testCtx(t, 10*time.Second), msgs), 2)
		if errs[0] != nil {
			t.Errorf("first message: %v", errs[0])
		}
		if publishers.ClassOf(errs[1]).String() != "transient" {
			t.Errorf("message to a full stream: %s (%v), want transient", publishers.ClassOf(errs[1]).String(), errs[1])
		}
	})
}

// MaxInFlight bounds what is sent and not acknowledged, and an ended
// context stops the sending: with the server silent, a Publish of ten
// messages sends MaxInFlight of them, fails all ten when its deadline
// passes, and sends none later. Once the server answers again, the slots
// of the abandoned messages are free and the next Publish goes through on
// the same connection, after them.
func TestMaxInFlightAndEndedContextStopSending(t *testing.T) {
	t.Parallel()
	c := connect(t, serverURL())
	subject, stream := c.newStream(t, "inflight", nil)
	proxy, err := faultproxy.Start(serverAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	const maxInFlight = 4
	p := newPublisher(t, natssink.Config{URLs: []string{"nats://" + proxy.Addr()}, MaxInFlight: maxInFlight})
	if err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg(subject, "k", "warm")}); err != nil {
		t.Fatal(err)
	}

	proxy.Stall()
	var stalled []outbox.Message
	for i := range 10 {
		stalled = append(stalled, newMsg(subject, "k", fmt.Sprintf("stalled %d", i)))
	}
	// The first MaxInFlight are sent at once; 2s leaves a busy machine the
	// time to send them before the deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for i, err := range perMessage(t, p.Publish(ctx, stalled), len(stalled)) {
		if err == nil || publishers.IsPermanent(err) {
			t.Errorf("stalled message %d: %s (%v), want a failure that is not permanent", i, publishers.ClassOf(err).String(), err)
		}
	}
	proxy.Heal()

	if err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg(subject, "k", "marker")}); err != nil {
		t.Fatalf("Publish after the server answers again: %v", err)
	}
	var got []string
	for _, m := range c.read(t, stream) {
		got = append(got, string(m.Data()))
	}
	want := []string{"warm", "stalled 0", "stalled 1", "stalled 2", "stalled 3", "marker"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the stream holds %q, want %q: the first %d stalled messages (sent before the deadline), none after", got, want, maxInFlight)
	}
}

// A subject the credentials may not publish to: the server drops the
// message with an asynchronous permissions error, which the sink logs; the
// message fails as unavailable when its PubAck times out.
func TestPermissionViolation(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "nats.conf")
	err := os.WriteFile(conf, []byte(`
jetstream {}
authorization {
  users = [
    {user: relay, password: relay-pass, permissions: {publish: {deny: ["forbidden.>"]}}}
    {user: admin, password: admin-pass}
  ]
}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "-c", conf)
	admin := connect(t, strings.Replace(s.URL, "nats://", "nats://admin:admin-pass@", 1))
	admin.keepStreams = true
	admin.newStream(t, "perm", func(cfg *jetstream.StreamConfig) { cfg.Subjects = []string{"forbidden.>"} })
	var logs syncbuf.Buffer
	p := newPublisher(t, natssink.Config{
		URLs: []string{s.URL}, User: "relay", Password: "relay-pass", PublishTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	err = p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("forbidden.orders", "k", "x")})
	if publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Publish to a forbidden subject = %v (%s), want unavailable", err, publishers.ClassOf(err).String())
	}
	if !strings.Contains(logs.String(), "Permissions Violation") {
		t.Errorf("the permissions violation was not logged:\n%s", logs.String())
	}
}

// Keys arrive byte for byte, in outbox-key when they read as text and in
// outbox-key-base64 otherwise; a nil key sets neither header.
func TestKeyHeaders(t *testing.T) {
	t.Parallel()
	c := connect(t, serverURL())
	subject, stream := c.newStream(t, "keys", nil)
	p := newPublisher(t, natssink.Config{URLs: []string{serverURL()}})
	cases := []struct {
		key    []byte
		header string
	}{
		{[]byte("order-1"), natssink.HeaderKey},
		{[]byte("héllo wörld ✓"), natssink.HeaderKey},
		{[]byte{}, natssink.HeaderKey},
		{nil, ""},
		{[]byte(" padded"), natssink.HeaderKeyBase64},
		{[]byte("tab\there"), natssink.HeaderKeyBase64},
		{[]byte("line\nbreak"), natssink.HeaderKeyBase64},
		{[]byte{0, 0xff, 0xfe}, natssink.HeaderKeyBase64},
	}
	var msgs []outbox.Message
	for i, tc := range cases {
		m := newMsg(subject, "", fmt.Sprint(i))
		m.Key = tc.key
		msgs = append(msgs, m)
	}
	if err := p.Publish(testCtx(t, 10*time.Second), msgs); err != nil {
		t.Fatal(err)
	}
	got := c.read(t, stream)
	if len(got) != len(cases) {
		t.Fatalf("%d messages arrived, want %d", len(got), len(cases))
	}
	for i, tc := range cases {
		h := got[i].Headers()
		key, err := natssink.Key(h)
		if err != nil {
			t.Errorf("key %q: %v", tc.key, err)
		}
		if !bytes.Equal(key, tc.key) || (key == nil) != (tc.key == nil) {
			t.Errorf("key %q arrived as %q", tc.key, key)
		}
		_, raw := h[natssink.HeaderKey]
		_, b64 := h[natssink.HeaderKeyBase64]
		switch {
		case tc.header == "" && (raw || b64):
			t.Errorf("nil key: headers %v", h)
		case tc.header == natssink.HeaderKey && (!raw || b64), tc.header == natssink.HeaderKeyBase64 && (raw || !b64):
			t.Errorf("key %q: headers %v, want it in %s only", tc.key, h, tc.header)
		}
	}
}

// Close returns promptly with a Publish in flight; that Publish fails as
// unavailable at once, and later calls fail as unavailable without
// connecting.
func TestCloseDuringPublish(t *testing.T) {
	t.Parallel()
	srv := startSilentServer(t)
	p := newPublisher(t, natssink.Config{URLs: []string{srv.url}})
	done := make(chan error, 1)
	go func() { done <- p.Publish(testCtx(t, time.Minute), []outbox.Message{newMsg("orders", "k", "stuck")}) }()
	select {
	case <-srv.published:
	case err := <-done:
		t.Fatalf("Publish returned before Close, from a server that never acknowledges: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no message reached the server within 10s")
	}
	// The Publish would otherwise wait out its minute: Close (bounded by
	// closeWait, 1s) and the Publish's end are given 20s on a busy machine.
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("Close took %v", took)
	}
	select {
	case err := <-done:
		if publishers.ClassOf(err).String() != "unavailable" || !errors.Is(err, natssink.ErrClosed) {
			t.Errorf("Publish in flight at Close: %s (%v), want unavailable ErrClosed", publishers.ClassOf(err).String(), err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the Publish in flight at Close has not returned 20s after Close")
	}
	for name, err := range map[string]error{
		"Publish": p.Publish(testCtx(t, time.Second), []outbox.Message{newMsg("orders", "k", "after")}),
		"Probe":   p.Probe(testCtx(t, time.Second)),
	} {
		if publishers.ClassOf(err).String() != "unavailable" || !errors.Is(err, natssink.ErrClosed) {
			t.Errorf("%s after Close: %s (%v), want unavailable ErrClosed", name, publishers.ClassOf(err).String(), err)
		}
	}
}

// A server that takes messages but never acknowledges them: each
// message fails as unavailable once PublishTimeout passes, however long
// the context, and so does Probe.
func TestNoPubAckInTimeIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := startSilentServer(t)
	const timeout = 200 * time.Millisecond
	p := newPublisher(t, natssink.Config{URLs: []string{srv.url}, PublishTimeout: timeout})
	msgs := []outbox.Message{newMsg("orders", "k", "1"), newMsg("orders", "k", "2")}
	start := time.Now()
	for i, err := range perMessage(t, p.Publish(testCtx(t, time.Minute), msgs), len(msgs)) {
		if publishers.ClassOf(err).String() != "unavailable" || !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			t.Errorf("message %d: %s (%v), want unavailable, no PubAck in time", i, publishers.ClassOf(err).String(), err)
		}
	}
	if took := time.Since(start); took > timeout+20*time.Second { // not the context's minute
		t.Errorf("Publish took %v with a publish timeout of %v", took, timeout)
	}
	// A probe that times out drops the connection: the next one dials
	// afresh instead of waiting on a connection that may be broken.
	for i := range 2 {
		if err := p.Probe(testCtx(t, time.Minute)); publishers.ClassOf(err).String() != "unavailable" {
			t.Errorf("Probe %d = %v (%s), want unavailable", i+1, err, publishers.ClassOf(err).String())
		}
	}
	if n := srv.accepted.Load(); n != 2 {
		t.Errorf("the server accepted %d connections, want 2: Publish's, which the first Probe used and dropped, and the second Probe's", n)
	}
}

// silentServer speaks enough of the NATS protocol to accept a connection,
// then never acknowledges a message; published receives once per message
// that reached it.
type silentServer struct {
	url       string
	published chan struct{}
	accepted  atomic.Int32
}

// startSilentServer listens on loopback until t ends.
func startSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{url: "nats://" + ln.Addr().String(), published: make(chan struct{}, 100)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() { s.serve(conn) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

// serve answers the handshake (INFO, then PONG to each PING) and reports
// each HPUB, whose payload it skips.
func (s *silentServer) serve(conn net.Conn) {
	defer conn.Close()
	info := `INFO {"server_id":"silent","version":"2.10.0","proto":1,"headers":true,"max_payload":1048576}` + "\r\n"
	if _, err := io.WriteString(conn, info); err != nil {
		return
	}
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "PING":
			if _, err := io.WriteString(conn, "PONG\r\n"); err != nil {
				return
			}
		case "HPUB", "PUB":
			size, err := strconv.Atoi(fields[len(fields)-1])
			if err != nil {
				return
			}
			if _, err := io.CopyN(io.Discard, r, int64(size)+2); err != nil {
				return
			}
			s.published <- struct{}{}
		}
	}
}
