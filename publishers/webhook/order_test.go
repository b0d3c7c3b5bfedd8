package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// A transient failure stops its key for the rest of the call: the key's
// later messages are not sent and fail with an error that wraps it (the
// same class, the same Retry-After); a permanent failure does not stop its
// key; other keys go on.
func TestFailureStopsItsKey(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, withAnswer(func(w http.ResponseWriter, d *delivery) bool {
		switch string(d.Body) {
		case "a2":
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		case "c1":
			w.WriteHeader(http.StatusUnprocessableEntity)
			return true
		}
		return false
	}))
	p := newPublisher(t, webhook.Config{URL: r.URL()})
	topic := topicName("stop")
	msgs := []outbox.Message{
		msg(topic, "a", "a1"), msg(topic, "b", "b1"), msg(topic, "c", "c1"),
		msg(topic, "a", "a2"), msg(topic, "b", "b2"), msg(topic, "c", "c2"),
		msg(topic, "a", "a3"), msg(topic, "", "n1"), msg(topic, "a", "a4"),
	}
	want := []string{"acknowledged", "acknowledged", "permanent", "transient", "acknowledged", "acknowledged", "transient", "acknowledged", "transient"}
	errs := publish(t, p, msgs)
	for i, err := range errs {
		if got := publishers.ClassOf(err).String(); got != want[i] {
			t.Errorf("%s: %s (%v), want %s", msgs[i].Payload, got, err, want[i])
		}
	}
	for _, i := range []int{6, 8} { // a3, a4: held behind a2
		if d, ok := publishers.RetryAfterOf(errs[i]); !ok || d != 3*time.Second {
			t.Errorf("%s: retry after %v (%t), want a2's 3s", msgs[i].Payload, d, ok)
		}
		if !strings.Contains(errs[i].Error(), msgs[3].ID.String()) {
			t.Errorf("%s: the error does not name a2 (%s): %v", msgs[i].Payload, msgs[3].ID, errs[i])
		}
	}
	if got := bodies(r.deliveries(topic)); strings.Contains(strings.Join(got, " "), "a3") || strings.Contains(strings.Join(got, " "), "a4") {
		t.Errorf("a3 or a4 was sent after a2 failed: %v", got)
	}
	if n := r.arrived.Load(); n != 7 {
		t.Errorf("%d requests arrived, want 7 (all but a3 and a4)", n)
	}
}

// One key has at most one request in flight, its messages arrive in
// order; different keys and keyless messages go in parallel up to
// MaxInFlight, which bounds the requests of all Publish calls together.
func TestConcurrencyPerKeyAndInFlight(t *testing.T) {
	t.Parallel()
	const maxInFlight = 4
	var (
		mu        sync.Mutex
		inFlight  int
		peak      int
		perKey    = map[string]int{}
		keyPeak   = map[string]int{}
		barrier   = make(chan struct{}) // closed once maxInFlight requests were in flight at once
		barrierUp bool
	)
	r := startReceiver(t, withAnswer(func(w http.ResponseWriter, d *delivery) bool {
		key := d.Header.Get(webhook.HeaderKey)
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		perKey[key]++
		if key != "" {
			keyPeak[key] = max(keyPeak[key], perKey[key])
		}
		if inFlight == maxInFlight && !barrierUp {
			barrierUp = true
			close(barrier)
		}
		mu.Unlock()
		// The first requests wait until maxInFlight are open at once:
		// the sink must reach that many (or this test times out).
		select {
		case <-barrier:
		case <-time.After(10 * time.Second):
			t.Errorf("only %d requests were ever in flight at once; want %d", peak, maxInFlight)
		}
		mu.Lock()
		inFlight--
		perKey[key]--
		mu.Unlock()
		return false
	}))
	p := newPublisher(t, webhook.Config{URL: r.URL(), MaxInFlight: maxInFlight})
	topic := topicName("concurrency")
	var calls [2][]outbox.Message
	for c := range calls {
		for i := range 60 {
			key := fmt.Sprintf("call-%d-key-%d", c, i%10)
			if i%7 == 0 {
				key = ""
			}
			calls[c] = append(calls[c], msg(topic, key, fmt.Sprintf("call %d message %d", c, i)))
		}
	}
	var wg sync.WaitGroup
	for c := range calls {
		wg.Go(func() {
			if err := p.Publish(context.Background(), calls[c]); err != nil {
				t.Errorf("Publish %d: %v", c, err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if peak != maxInFlight {
		t.Errorf("at most %d requests were in flight at once; want exactly MaxInFlight, %d", peak, maxInFlight)
	}
	for key, n := range keyPeak {
		if n > 1 {
			t.Errorf("key %s had %d requests in flight at once", key, n)
		}
	}
	arrived := map[string][]string{} // per call and key, the payloads in arrival order
	for _, d := range r.deliveries(topic) {
		if k := d.Header.Get(webhook.HeaderKey); k != "" {
			call, _, _ := strings.Cut(string(d.Body), " message")
			arrived[call+"/"+k] = append(arrived[call+"/"+k], string(d.Body))
		}
	}
	for c, msgs := range calls {
		want := map[string][]string{}
		for _, m := range msgs {
			if m.Key != nil {
				id := fmt.Sprintf("call %d/%s", c, m.Key)
				want[id] = append(want[id], string(m.Payload))
			}
		}
		for id, w := range want {
			if strings.Join(arrived[id], "|") != strings.Join(w, "|") {
				t.Errorf("%s arrived in the order %q, published in %q", id, arrived[id], w)
			}
		}
	}
}

// One call's messages of one key never overlap: with MaxInFlight 1000
// and one key, the requests still go one at a time.
func TestOneKeyOneRequestAtATime(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	inFlight, peak := 0, 0
	r := startReceiver(t, withAnswer(func(http.ResponseWriter, *delivery) bool {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		runtime.Gosched() // a window for an overlapping request to show
		mu.Lock()
		inFlight--
		mu.Unlock()
		return false
	}))
	p := newPublisher(t, webhook.Config{URL: r.URL(), MaxInFlight: 1000})
	topic := topicName("one-key")
	var msgs []outbox.Message
	for i := range 200 {
		msgs = append(msgs, msg(topic, "the-key", fmt.Sprint(i)))
	}
	if err := p.Publish(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	if peak != 1 {
		t.Errorf("%d requests of one key were in flight at once", peak)
	}
	for i, b := range bodies(r.deliveries(topic)) {
		if b != fmt.Sprint(i) {
			t.Fatalf("arrival %d is message %s", i, b)
		}
	}
}
