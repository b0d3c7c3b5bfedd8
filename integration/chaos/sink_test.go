package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/history"
	"github.com/outboxrelay/outboxrelay/internal/sinks"
)

// sink is the destination the relays publish to: a sink of the registry
// (internal/sinks), with its broker behind the broker fault proxy. The
// relays publish with the real sink of `relay run --sink`, its flags
// pointing at the proxy; the sink's Reader, connected to the broker
// directly where it can be, prepares the run's two topics, follows them
// during the run as a consumer would (which gives a record of a broker
// that keeps no time its arrival time) and reads what is left once the
// relays have stopped.
type sink struct {
	name           string
	setup          setup
	ordered, plain string
	proxy          *faultproxy.Proxy
	reader         sinks.Reader
	relayFlags     []string      // --sink, the proxied broker, setup.flags
	env            []string      // the sink's flags, as variables
	flags          *flag.FlagSet // the sink's flags, as the reader settled them
	prepared       []string      // the reader's descriptions of the topics
	refuser        *refuser

	mu  sync.Mutex
	got map[place]record // a record read twice, following and at the end, is kept once

	stopFollow context.CancelFunc
	follows    sync.WaitGroup
	followErrs []error // guarded by mu
}

// place is where a record sits in its destination.
type place struct {
	topic     string
	partition int
	offset    int64
}

// record is one record a sink read back: what the checker compares, and
// the payload it carried, which the harness compares with the one written.
type record struct {
	history.Delivery
	payload string
}

// sinkFromEnv returns the sink OUTBOX_CHAOS_SINK names, kafka by default:
// any sink of the registry that can be read back. seed drives its random
// choices.
func sinkFromEnv(seed uint64) (string, *sink, error) {
	name := os.Getenv("OUTBOX_CHAOS_SINK")
	if name == "" {
		name = "kafka"
	}
	if !slices.Contains(sinks.Readables(), name) {
		return name, nil, fmt.Errorf("OUTBOX_CHAOS_SINK=%q: want one of %v", name, sinks.Readables())
	}
	s := &sink{name: name, setup: setups[name], refuser: newRefuser(seed), got: map[place]record{}}
	s.ordered, s.plain = runTopics()
	return name, s, nil
}

func (s *sink) topics() (string, string)        { return s.ordered, s.plain }
func (s *sink) refuse(share *float64)           { s.refuser.share.Store(share) }
func (s *sink) refused() int64                  { return s.refuser.n.Load() }
func (s *sink) relayArgs() (args, env []string) { return s.relayFlags, s.env }

// kinds is every fault kind where the harness can make the broker refuse
// a share of publishes (setup.broker or setup.front), every kind but
// broker-errors elsewhere.
func (s *sink) kinds() []string {
	if s.setup.broker != nil || s.setup.front != nil {
		return allKinds
	}
	return slices.DeleteFunc(slices.Clone(allKinds), func(k string) bool { return k == brokerErrors })
}

// where describes the broker, for the log.
func (s *sink) where() string {
	return fmt.Sprintf("%s: %s; the relays through the proxy on %s", s.name, strings.Join(s.prepared, "; "), s.proxy.Addr())
}

// start starts the sink's broker (setup.broker) or finds it (its flags,
// setup.args), puts the fault proxy in front of it, prepares the run's
// topics and starts following them, registering their removal with
// t.Cleanup. It returns the proxy the broker faults act on.
func (s *sink) start(ctx context.Context, t *testing.T) *faultproxy.Proxy {
	sk, _ := sinks.Named(s.name)
	args := s.setup.args
	if s.setup.broker != nil {
		s.proxy, args = s.setup.broker(t, s.refuser)
	}
	settings, fs, err := sk.Parse(args...)
	if err != nil {
		t.Fatal(err)
	}
	s.flags = fs
	if s.reader, err = settings.(sinks.Readable).Reader(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.reader.Close() })
	s.env, s.relayFlags = sinks.Changed(fs), append([]string{"--sink", s.name}, s.setup.flags...)
	if s.proxy == nil {
		fl := fs.Lookup(s.name + "-url")
		if fl == nil {
			fl = fs.Lookup(s.name + "-endpoint") // sqs, kinesis
		}
		s.proxyURL(t, fl)
	}
	for _, topic := range []string{s.ordered, s.plain} {
		desc, err := s.reader.Prepare(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		s.prepared = append(s.prepared, strings.TrimSpace(strings.TrimPrefix(desc, s.name+":")))
		t.Cleanup(func() {
			if err := s.reader.Remove(context.WithoutCancel(ctx), topic); err != nil {
				t.Error(err)
			}
		})
	}
	follow, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopFollow = stop
	t.Cleanup(s.stopFollowing)
	for _, topic := range []string{s.ordered, s.plain} {
		s.follows.Go(func() {
			if err := s.reader.Read(follow, topic, true, s.keep(topic), nil); err != nil {
				s.mu.Lock()
				s.followErrs = append(s.followErrs, err)
				s.mu.Unlock()
			}
		})
	}
	return s.proxy
}

// proxyURL puts the fault proxy in front of the server the sink's
// --<sink>-url flag names (the one the reader started, for a webhook),
// or in front of setup.front standing before it, and points the relays'
// flag at the proxy.
func (s *sink) proxyURL(t *testing.T, fl *flag.Flag) {
	if fl == nil {
		t.Fatalf("the %s sink has no --%s-url for the fault proxy: give it a setup with a broker", s.name, s.name)
	}
	raw := fl.Value.String()
	u, err := url.Parse(raw)
	if err != nil || u.Port() == "" {
		t.Fatalf("the %s broker's URL %q has no host:port", s.name, raw)
	}
	addr := u.Host
	if s.setup.front != nil {
		addr = s.setup.front(t, addr, s.refuser)
	}
	if s.proxy, err = faultproxy.Start(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.proxy.Close() })
	// The host replaced in the text: parsing and printing would escape a
	// webhook URL's {topic}.
	s.relayFlags = append(s.relayFlags, "--"+fl.Name, strings.Replace(raw, u.Host, s.proxy.Addr(), 1))
}

// keep returns the function that keeps what the reader reads of topic.
func (s *sink) keep(topic string) func(sinks.Record) {
	return func(r sinks.Record) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p := place{topic, r.Partition, r.Offset}
		if _, seen := s.got[p]; !seen {
			s.got[p] = record{history.Delivery{EventID: r.EventID, Topic: topic, Key: r.Key,
				Partition: r.Partition, Offset: r.Offset, Time: r.Time}, r.Payload}
		}
	}
}

// stopFollowing ends the reads that follow the topics and waits for them.
func (s *sink) stopFollowing() {
	s.stopFollow()
	s.follows.Wait()
}

// read returns every record delivered, once the relays have stopped: what
// the readers that followed the topics got, and what is left in them.
func (s *sink) read(ctx context.Context, t *testing.T) []record {
	s.stopFollowing()
	for _, err := range s.followErrs {
		t.Logf("%s: following a topic: %v (the reads to the end take what it missed)", s.name, err)
	}
	for _, topic := range []string{s.ordered, s.plain} {
		if err := s.reader.Read(ctx, topic, false, s.keep(topic), nil); err != nil {
			t.Fatalf("%s: read %s back: %v", s.name, topic, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]record, 0, len(s.got))
	for _, r := range s.got {
		out = append(out, r)
	}
	return out
}

// runTopics returns the ordered and plain topics with a suffix unique to
// the run (".r" and 8 hex digits): a shared broker that keeps what earlier
// runs published then gives each run destinations of its own. The suffix
// does not come from the seed, so a replay gets fresh destinations too.
func runTopics() (ordered, plain string) {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails
	suffix := ".r" + hex.EncodeToString(b[:])
	return orderedTopic + suffix, plainTopic + suffix
}

// envOr returns the environment variable name, or def when it is unset.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
