package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// An outage is logged once when it starts, with the sink's error; at most
// every outageWarnEvery while it lasts, with its length, its latest error
// and the rows waiting; and once when it ends, however many batches and
// workers ran into it meanwhile.
func TestOutageIsLoggedOnceAndThenAtASlowCadence(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	testdb.InsertPending(t, pool, table, 7)
	var buf syncBuffer
	r, err := New(pool, nopPublisher{}, Config{Table: table, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	unavailable := publishers.Unavailable(errors.New("dial tcp: connection refused"))
	msgs := []outbox.Message{{Topic: "t"}, {Topic: "t"}}
	for range 3 { // three batches, as several workers would
		var out outcome
		var res BatchResult
		r.pipe.classify(msgs, []error{unavailable, unavailable}, publishWhole, false, &out, &res)
		if !res.SinkUnavailable || len(out.Retries) != 2 || out.Retries[0].Delay != 0 || !out.Retries[0].Refund {
			t.Fatalf("batch during the outage: result %+v, retries %+v; want both deferred, due at once, attempt given back", res, out.Retries)
		}
	}
	start := lines(t, &buf, "sink unavailable; pausing claims until it answers")
	if len(start) != 1 || start[0]["level"] != "WARN" || !strings.Contains(start[0]["error"].(string), "connection refused") {
		t.Fatalf("outage start logged as %v, want one WARN with the error", start)
	}

	r.sink.warn(ctx)
	if got := lines(t, &buf, "sink still unavailable"); len(got) != 0 {
		t.Fatalf("outage logged again at once: %v", got)
	}
	// As if the outage began 45s ago and was last logged 31s ago.
	r.sink.mu.Lock()
	r.sink.since = time.Now().Add(-45 * time.Second)
	r.sink.warned = time.Now().Add(-outageWarnEvery - time.Second)
	r.sink.last = "dial tcp: i/o timeout"
	r.sink.mu.Unlock()
	r.sink.warn(ctx)
	r.sink.warn(ctx) // within the cadence: not logged
	lasting := lines(t, &buf, "sink still unavailable")
	if len(lasting) != 1 {
		t.Fatalf("%d lines for a lasting outage, want 1: %v", len(lasting), lasting)
	}
	l := lasting[0]
	if l["level"] != "WARN" || l["outage"] != float64(45*time.Second) || l["error"] != "dial tcp: i/o timeout" || l["deferred"] != float64(6) || l["rows_waiting"] != float64(7) {
		t.Errorf("lasting outage logged as %v; want WARN, outage 45s, the latest error, 6 deferred, 7 rows waiting", l)
	}

	r.sink.answered()
	r.sink.answered() // no outage: nothing to log
	end := lines(t, &buf, "sink answers again; resuming")
	if len(end) != 1 || end[0]["level"] != "INFO" || end[0]["deferred"] != float64(6) || end[0]["outage"] == nil {
		t.Fatalf("outage end logged as %v, want one INFO with its length and 6 rows deferred", end)
	}
	if r.sink.isDown() {
		t.Error("sink still down after it answered")
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the JSON log lines of buf whose message is msg.
func lines(t *testing.T, buf *syncBuffer, msg string) []map[string]any {
	t.Helper()
	buf.mu.Lock()
	text := buf.b.String()
	buf.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// stuckPublisher ignores its context: Publish returns only when release is
// closed.
type stuckPublisher struct {
	started chan struct{}
	once    sync.Once
	release chan struct{}
}

func (p *stuckPublisher) Publish(context.Context, []outbox.Message) error {
	p.once.Do(func() { close(p.started) })
	<-p.release
	return nil
}

func (p *stuckPublisher) Close() error { return nil }

// A sink that ignores its context does not hold shutdown up: Run returns
// once it abandons the publish, abandonAfter past ShutdownTimeout, and the rows of the abandoned publish keep
// their lease (the sink may still be sending them) instead of being given
// back to another replica.
func TestRunAbandonsAPublishThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	testdb.InsertPending(t, pool, table, 5)
	pub := &stuckPublisher{started: make(chan struct{}), release: make(chan struct{})}
	defer close(pub.release)
	r := quietRelay(t, pool, pub, Config{Table: table, ShutdownTimeout: 300 * time.Millisecond, Workers: 1, KeepSent: true})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-pub.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay never published")
	}
	start := time.Now()
	cancel()
	// The publish never returns (release is closed when the test ends), so
	// Run returning at all shows it abandoned the publish; the bound is far
	// above ShutdownTimeout + shutdownGrace, which a busy machine can
	// overrun, and below Lease (30s) and PublishTimeout (1m), the next
	// timers that could end the wait.
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15s of cancellation: it waits for the stuck publish")
	}
	if took, least := time.Since(start), 300*time.Millisecond+abandonAfter; took < least {
		t.Errorf("Run returned %v after cancellation, before ShutdownTimeout + abandonAfter = %v: it did not give the publish its time", took, least)
	}
	var processing int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table.Ident()+" WHERE status = 'processing' AND locked_until > now()").Scan(&processing); err != nil {
		t.Fatal(err)
	}
	if processing != 5 {
		t.Errorf("%d of 5 rows still leased after the publish was abandoned, want 5", processing)
	}
}

// flappingSink answers every probe but refuses every message as long as
// refuse is set, like a Kafka cluster with too few in-sync replicas.
type flappingSink struct {
	refuse atomic.Bool
	calls  atomic.Int64
}

func (s *flappingSink) Probe(context.Context) error { return nil }

func (s *flappingSink) Publish(_ context.Context, msgs []outbox.Message) error {
	s.calls.Add(1)
	if s.refuse.Load() {
		return errors.New("NOT_ENOUGH_REPLICAS") // transient, for every message
	}
	return nil
}

func (s *flappingSink) Close() error { return nil }

// A sink that answers probes but refuses every message is one outage, not
// a new one per probe: one WARN, trials ever further apart, and one INFO
// when it takes messages again. No attempt is spent meanwhile.
func TestSinkAnsweringProbesButRefusingMessagesIsOneOutage(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	testdb.InsertPending(t, pool, table, 20)
	sink := &flappingSink{}
	sink.refuse.Store(true)
	var buf syncBuffer
	r, err := New(pool, sink, Config{Table: table, ProbeInterval: 20 * time.Millisecond, KeepSent: true,
		Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, r)

	// Trials at 20, 40, 80, 160, 160, ... ms: count what a second brings.
	deadline := time.Now().Add(10 * time.Second)
	for r.sink.trialCount() < 6 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s only %d trials fell back into the outage", r.sink.trialCount())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := len(lines(t, &buf, "sink unavailable; pausing claims until it answers")); n != 1 {
		buf.mu.Lock()
		t.Errorf("%d outage starts logged, want 1:\n%s", n, buf.b.String())
		buf.mu.Unlock()
	}
	if n := len(lines(t, &buf, "sink answers again; resuming")); n != 0 {
		t.Errorf("%d outage ends logged while every message was refused, want 0", n)
	}
	if w := r.sink.trialWait(); w != 8*20*time.Millisecond {
		t.Errorf("trial wait %v after 6 failed trials, want %v", w, 8*20*time.Millisecond)
	}
	var attempted int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table.Ident()+" WHERE attempt <> 0 AND status = 'pending'").Scan(&attempted); err != nil {
		t.Fatal(err)
	}
	if attempted != 0 {
		t.Errorf("%d rows spent an attempt in the outage", attempted)
	}

	sink.refuse.Store(false)
	for r.sink.isDown() || r.sink.inOutage() {
		if time.Now().After(deadline) {
			t.Fatal("the outage did not end after the sink took messages again")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The end is logged just after the state flips: wait for the line.
	for len(lines(t, &buf, "sink answers again; resuming")) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := len(lines(t, &buf, "sink answers again; resuming")); n != 1 {
		t.Errorf("%d outage ends logged, want 1", n)
	}
}
