package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// webhookSink is the HTTP webhook sink: a receiver in the harness's
// process, on a loopback port, takes POST /hooks/<topic> for the topics
// prepared and answers 204 once it read the body, recording the
// webhook-id of each request as it arrives. The ceiling posts the same
// requests (same body, same headers but the signature, which the relays
// do not set either) with a net/http client holding
// webhook.DefaultMaxInFlight requests open at once, as the sink does.
type webhookSink struct {
	base   string // http://127.0.0.1:port
	srv    *http.Server
	served chan struct{}

	mu     sync.Mutex
	topics map[string]*arrivals // what each prepared topic received, or the reader's arrivals once it follows

	client *http.Client
	slots  chan struct{} // the ceiling's requests in flight
}

// webhookPath is where the receiver takes a topic's events.
const webhookPath = "/hooks/"

func openWebhook() (*webhookSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	w := &webhookSink{
		base:   "http://" + ln.Addr().String(),
		served: make(chan struct{}),
		topics: map[string]*arrivals{},
		client: &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        webhook.DefaultMaxInFlight,
			MaxIdleConnsPerHost: webhook.DefaultMaxInFlight,
			IdleConnTimeout:     90 * time.Second,
		}, Timeout: webhook.DefaultTimeout},
		slots: make(chan struct{}, webhook.DefaultMaxInFlight),
	}
	w.srv = &http.Server{Handler: http.HandlerFunc(w.receive), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(w.served)
		_ = w.srv.Serve(ln) // until close
	}()
	return w, nil
}

// receive is the receiver's handler.
func (w *webhookSink) receive(rw http.ResponseWriter, req *http.Request) {
	topic, ok := strings.CutPrefix(req.URL.Path, webhookPath)
	if req.Method != http.MethodPost || !ok {
		http.Error(rw, "POST /hooks/<topic> only", http.StatusMethodNotAllowed)
		return
	}
	if _, err := io.Copy(io.Discard, req.Body); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	at := time.Now()
	id, _ := uuid.Parse(req.Header.Get(webhook.HeaderWebhookID))
	w.mu.Lock()
	a := w.topics[topic]
	w.mu.Unlock()
	if a == nil {
		http.Error(rw, "no such topic", http.StatusNotFound) // a permanent failure: the run stops short
		return
	}
	a.add([]uuid.UUID{id}, at)
	rw.WriteHeader(http.StatusNoContent)
}

func (w *webhookSink) relayArgs() []string {
	return []string{"--sink", "webhook", "--webhook-url", w.base + webhookPath + "{topic}"}
}

func (w *webhookSink) relayEnv() []string { return nil }

func (w *webhookSink) prepare(_ context.Context, topic string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.topics[topic] = newArrivals(0)
	return nil
}

func (w *webhookSink) cleanup(_ context.Context, topic string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.topics, topic)
	return nil
}

// read hands over what the receiver recorded for topic; with follow, the
// receiver records into a from then on, until ctx ends.
func (w *webhookSink) read(ctx context.Context, topic string, follow bool, a *arrivals, ready func()) error {
	w.mu.Lock()
	got := w.topics[topic]
	if got == nil {
		w.mu.Unlock()
		return fmt.Errorf("webhook receiver: topic %s was not prepared", topic)
	}
	a.merge(got)
	if follow {
		w.topics[topic] = a
	}
	w.mu.Unlock()
	if ready != nil {
		ready()
	}
	if follow {
		<-ctx.Done()
	}
	return nil
}

func (w *webhookSink) publish(ctx context.Context, topic string, msgs []outbox.Message) error {
	url := w.base + webhookPath + topic
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i := range msgs {
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-w.slots }()
			errs[i] = w.post(ctx, url, &msgs[i])
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// post sends one message as the sink does and wants 2xx.
func (w *webhookSink) post(ctx context.Context, url string, m *outbox.Message) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(m.Payload))
	if err != nil {
		return err
	}
	id := m.ID.String()
	req.Header[webhook.HeaderWebhookID] = []string{id}
	req.Header[webhook.HeaderEventID] = []string{id}
	req.Header["Idempotency-Key"] = []string{`"` + id + `"`}
	req.Header[webhook.HeaderWebhookTimestamp] = []string{fmt.Sprint(time.Now().Unix())}
	req.Header["Content-Type"] = []string{webhook.DefaultContentType}
	req.Header[webhook.HeaderTopic] = []string{m.Topic}
	req.Header[webhook.HeaderKey] = []string{string(m.Key)}
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook: %s answered %s", url, resp.Status)
	}
	return nil
}

func (w *webhookSink) settings(s *Settings) {
	s.Sink, s.SinkURL = SinkWebhook, w.base+webhookPath+"{topic}"
}

func (w *webhookSink) close() error {
	w.client.CloseIdleConnections()
	err := w.srv.Close()
	<-w.served
	return err
}

var _ ceilingSink = (*webhookSink)(nil)
