package chaos

import (
	"context"
	"fmt"
	"net/url"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/history"
	"github.com/outboxrelay/outboxrelay/internal/sinks"
)

// registrySink is a sink of the registry (internal/sinks) whose broker one
// TCP fault proxy can stand in front of. The sink's reader, connected to
// the broker directly, prepares the run's two topics and reads them back
// once the relays have stopped; the relays reach the broker through the
// proxy. Their connections do not reconnect, so they never follow a
// server's advertised addresses around it.
type registrySink struct {
	name, url      string
	extra          []string // more relay flags
	ordered, plain string
	proxy          *faultproxy.Proxy
	reader         sinks.Reader
}

// proxied are the sinks run as a registrySink: the broker's URL (from a
// variable, or the local one) and the relays' bounds on a publish.
var proxied = map[string]func() (string, []string){
	"nats": func() (string, []string) {
		return envOr("OUTBOX_TEST_NATS_URL", "nats://127.0.0.1:4222"), []string{"--nats-publish-timeout", publishTimeout.String()}
	},
	"redis": func() (string, []string) {
		return "redis://" + envOr("OUTBOX_TEST_REDIS_ADDR", "127.0.0.1:6379") + "/0",
			[]string{"--redis-timeout", publishTimeout.String(), "--redis-dial-timeout", "2s"}
	},
}

func newRegistrySink(name string) *registrySink {
	s := &registrySink{name: name}
	s.url, s.extra = proxied[name]()
	s.ordered, s.plain = runTopics()
	return s
}

func (s *registrySink) topics() (string, string) { return s.ordered, s.plain }
func (s *registrySink) kinds() []string          { return kindsWithoutErrors() }
func (s *registrySink) refuse(*float64)          {}
func (s *registrySink) refused() int64           { return 0 }

// viaProxy is the broker's URL with the proxy's address.
func (s *registrySink) viaProxy() *url.URL {
	u, _ := url.Parse(s.url) // parsed in start
	u.Host = s.proxy.Addr()
	return u
}

func (s *registrySink) where() string {
	return fmt.Sprintf("%s (proxy of %s), destinations %s and %s", s.viaProxy().Redacted(), s.url, s.ordered, s.plain)
}

func (s *registrySink) relayArgs() (args, env []string) {
	return append([]string{"--sink", s.name, "--" + s.name + "-url", s.viaProxy().String()}, s.extra...), nil
}

func (s *registrySink) start(ctx context.Context, t *testing.T) *faultproxy.Proxy {
	u, err := url.Parse(s.url)
	if err != nil || u.Port() == "" {
		t.Fatalf("the %s broker's URL %q has no host:port", s.name, s.url)
	}
	sk, _ := sinks.Named(s.name)
	settings, _, err := sk.Parse("--"+s.name+"-url", s.url)
	if err != nil {
		t.Fatal(err)
	}
	if s.reader, err = settings.(sinks.Readable).Reader(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.reader.Close() })
	for _, topic := range []string{s.ordered, s.plain} {
		if _, err := s.reader.Prepare(ctx, topic); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.reader.Remove(context.WithoutCancel(ctx), topic); err != nil {
				t.Error(err)
			}
		})
	}
	if s.proxy, err = faultproxy.Start(u.Host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.proxy.Close() })
	return s.proxy
}

// read reads both destinations to their end.
func (s *registrySink) read(ctx context.Context, t *testing.T) []record {
	var out []record
	for _, topic := range []string{s.ordered, s.plain} {
		err := s.reader.Read(ctx, topic, false, func(r sinks.Record) {
			out = append(out, record{history.Delivery{EventID: r.EventID, Topic: topic, Key: r.Key,
				Partition: r.Partition, Offset: r.Offset, Time: r.Time}, r.Payload})
		}, nil)
		if err != nil {
			t.Fatalf("%s: read %s back: %v", s.name, topic, err)
		}
	}
	return out
}
