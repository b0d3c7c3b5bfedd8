package chaos

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/history"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// webhookPath is where the receiver takes POSTs: webhookPath + topic.
const webhookPath = "/chaos/"

// webhookSink is an HTTP receiver in the test process, on loopback behind
// a fault proxy. It records every POST to /chaos/<topic> with its arrival
// order and time, and answers 204. During broker-errors it answers a share
// of the POSTs 503 instead, recording nothing: the transient refusal of a
// webhook endpoint, as NOT_LEADER_FOR_PARTITION is Kafka's.
type webhookSink struct {
	ordered, plain string
	ln             net.Listener
	srv            *http.Server
	proxy          *faultproxy.Proxy

	share    atomic.Pointer[float64]
	refusedN atomic.Int64

	mu  sync.Mutex // serializes arrivals: their order is the record's position
	rng *rand.Rand
	got []record
}

func newWebhookSink(seed uint64) *webhookSink {
	s := &webhookSink{rng: rand.New(rand.NewPCG(seed, 7))}
	s.ordered, s.plain = runTopics()
	return s
}

func (s *webhookSink) topics() (string, string) { return s.ordered, s.plain }
func (s *webhookSink) kinds() []string          { return allKinds }
func (s *webhookSink) refuse(share *float64)    { s.share.Store(share) }
func (s *webhookSink) refused() int64           { return s.refusedN.Load() }

func (s *webhookSink) where() string {
	return fmt.Sprintf("http://%s%s{topic} (proxy of the receiver on %s)", s.proxy.Addr(), webhookPath, s.ln.Addr())
}

func (s *webhookSink) relayArgs() (args, env []string) {
	return []string{"--sink", "webhook", "--webhook-url", "http://" + s.proxy.Addr() + webhookPath + webhook.TopicPlaceholder,
		"--webhook-timeout", publishTimeout.String()}, nil
}

func (s *webhookSink) start(_ context.Context, t *testing.T) *faultproxy.Proxy {
	var err error
	if s.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatalf("webhook receiver: %v", err)
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.srv.Serve(s.ln) // returns at Shutdown
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = s.srv.Close()
		}
		<-done
	})
	if s.proxy, err = faultproxy.Start(s.ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.proxy.Close() })
	return s.proxy
}

func (s *webhookSink) serve(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(rw, "cannot read the body", http.StatusBadRequest)
		return
	}
	topic, ok := strings.CutPrefix(r.URL.Path, webhookPath)
	if r.Method != http.MethodPost || !ok || topic != s.ordered && topic != s.plain {
		http.NotFound(rw, r)
		return
	}
	key := r.Header.Get(webhook.HeaderKey)
	if b64 := r.Header.Get(webhook.HeaderKeyBase64); b64 != "" {
		raw, _ := base64.StdEncoding.DecodeString(b64) // a bad one arrives as a wrong key: an order violation
		key = string(raw)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if share := s.share.Load(); share != nil && s.rng.Float64() < *share {
		s.refusedN.Add(1)
		http.Error(rw, "refused by the chaos harness (broker-errors)", http.StatusServiceUnavailable)
		return
	}
	s.got = append(s.got, record{history.Delivery{EventID: r.Header.Get(outbox.HeaderEventID), Topic: topic, Key: key,
		Offset: int64(len(s.got)), Time: time.Now()}, string(body)})
	rw.WriteHeader(http.StatusNoContent)
}

// read returns every POST recorded. The relays have stopped: a request
// still on its way would have had to outlive its relay.
func (s *webhookSink) read(context.Context, *testing.T) []record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]record(nil), s.got...)
}
