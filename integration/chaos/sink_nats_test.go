package chaos

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/history"
	"github.com/outboxrelay/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
)

// natsSink is a NATS server with JetStream (OUTBOX_TEST_NATS_URL, or the
// one on this machine) behind a fault proxy. The run's two topics are
// subjects captured by one stream of its own, created for the run and
// deleted after it; it is read back with an ordered consumer. A record's
// position is its stream sequence, its time when the stream stored it.
type natsSink struct {
	url            string
	ordered, plain string
	proxy          *faultproxy.Proxy
	nc             *nats.Conn
	js             jetstream.JetStream
	stream         string
}

func newNATSSink() *natsSink {
	s := &natsSink{url: envOr("OUTBOX_TEST_NATS_URL", natssink.DefaultURL)}
	s.ordered, s.plain = runTopics()
	s.stream = "OUTBOX_CHAOS_" + strings.ReplaceAll(strings.TrimPrefix(s.ordered, orderedTopic+"."), ".", "_")
	return s
}

func (s *natsSink) topics() (string, string) { return s.ordered, s.plain }
func (s *natsSink) kinds() []string          { return kindsWithoutErrors() }
func (s *natsSink) refuse(*float64)          {}
func (s *natsSink) refused() int64           { return 0 }

func (s *natsSink) where() string {
	return fmt.Sprintf("nats://%s (proxy of %s), stream %s capturing %s and %s", s.proxy.Addr(), s.url, s.stream, s.ordered, s.plain)
}

func (s *natsSink) relayArgs() (args, env []string) {
	return []string{"--sink", "nats", "--nats-url", "nats://" + s.proxy.Addr(),
		"--nats-publish-timeout", publishTimeout.String()}, nil
}

func (s *natsSink) start(ctx context.Context, t *testing.T) *faultproxy.Proxy {
	u, err := url.Parse(s.url)
	if err != nil || u.Port() == "" {
		t.Fatalf("OUTBOX_TEST_NATS_URL %q is not nats://host:port", s.url)
	}
	if s.nc, err = nats.Connect(s.url, nats.Name("outboxrelay-chaos"), nats.Timeout(5*time.Second)); err != nil {
		t.Fatalf("no NATS answers at %s (start nats-server -js, or set OUTBOX_TEST_NATS_URL): %v", s.url, err)
	}
	t.Cleanup(s.nc.Close)
	if s.js, err = jetstream.New(s.nc); err != nil {
		t.Fatal(err)
	}
	_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.stream, Subjects: []string{s.ordered, s.plain}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("nats: create stream %s (is JetStream enabled: nats-server -js?): %v", s.stream, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.js.DeleteStream(ctx, s.stream); err != nil {
			t.Errorf("nats: delete stream %s: %v", s.stream, err)
		}
	})
	// The relays' connections do not reconnect, so they never follow the
	// server's advertised addresses around the proxy: each dials the
	// proxy afresh.
	if s.proxy, err = faultproxy.Start(u.Host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.proxy.Close() })
	return s.proxy
}

// read consumes the stream from its first message until it has every
// message the stream holds.
func (s *natsSink) read(ctx context.Context, t *testing.T) []record {
	str, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		t.Fatalf("nats: stream %s: %v", s.stream, err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatalf("nats: stream %s: %v", s.stream, err)
	}
	cons, err := str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("nats: consumer of stream %s: %v", s.stream, err)
	}
	var out []record
	for uint64(len(out)) < info.State.Msgs {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("nats: fetch from stream %s: %v", s.stream, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				t.Fatalf("nats: metadata: %v", err)
			}
			key, _ := natssink.Key(m.Headers()) // a bad key header arrives as a wrong key: an order violation
			out = append(out, record{history.Delivery{EventID: m.Headers().Get(outbox.HeaderEventID), Topic: m.Subject(), Key: string(key),
				Offset: int64(meta.Sequence.Stream), Time: meta.Timestamp}, string(m.Data())})
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("nats: fetch from stream %s: %v", s.stream, err)
		}
		if n == 0 {
			t.Fatalf("nats: stream %s holds %d messages, read %d and then nothing more", s.stream, info.State.Msgs, len(out))
		}
	}
	return out
}
