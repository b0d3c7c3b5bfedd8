package metrics

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

func newMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{Version: "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// value returns the value of a counter or gauge.
func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

// The names follow Prometheus's conventions (promlint), and a second
// Metrics on the same registry is refused rather than mixed in.
func TestNamesLintAndRegisterOnce(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	// Series exist once used: use each labelled one.
	m.Observe(relay.Event{Kind: relay.EventRecorded, Claim: relay.ClaimLease, Topics: []relay.TopicCount{{Topic: "a", Sent: 1}}})
	_ = m.Publisher("kafka", &fakeSink{})
	problems, err := promlint.NewWithMetricFamilies(gather(t, reg)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	if _, err := New(reg, Options{}); err == nil {
		t.Error("a second New on the same registry succeeded")
	}
	info := family(t, reg, "outbox_build_info").GetMetric()[0]
	if l := info.GetLabel(); info.GetGauge().GetValue() != 1 || len(l) != 1 || l[0].GetName() != "version" || l[0].GetValue() != "v1.2.3" {
		t.Errorf("outbox_build_info = %v", info)
	}
}

func gather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// family returns the gathered family called name.
func family(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	for _, mf := range gather(t, reg) {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("no %s", name)
	return nil
}

// Hand-made events move the series they are documented to move.
func TestObserve(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	events := []relay.Event{
		{Kind: relay.EventClaimed, Claim: relay.ClaimLease, Rows: 5, Duration: 3 * time.Millisecond,
			Topics: []relay.TopicCount{{Topic: "orders", Claimed: 3}, {Topic: "users", Claimed: 2}}},
		{Kind: relay.EventClaimed, Claim: relay.ClaimLease, Duration: time.Millisecond}, // found nothing
		{Kind: relay.EventRecorded, Claim: relay.ClaimLease, Duration: 2 * time.Millisecond,
			Topics: []relay.TopicCount{
				{Topic: "orders", Claimed: 3, Sent: 1, Retried: 1, Fenced: 1},
				{Topic: "users", Claimed: 2, Failed: 1, Released: 1},
			}},
		{Kind: relay.EventClaimed, Claim: relay.ClaimOrdered, Rows: 1, Topics: []relay.TopicCount{{Topic: "orders", Claimed: 1}}},
		{Kind: relay.EventRecorded, Claim: relay.ClaimOrdered, Topics: []relay.TopicCount{{Topic: "orders", Claimed: 1, Abandoned: 1}}},
		{Kind: relay.EventLeaseLost, Rows: 4},
		{Kind: relay.EventJanitorRan, Rows: 1000},
		{Kind: relay.EventJanitorRan, Rows: 24},
		{Kind: relay.EventShardLeased, Shard: 1},
		{Kind: relay.EventShardLeased, Shard: 2},
		{Kind: relay.EventShardHandedBack, Shard: 1, Rows: 9},
	}
	for _, e := range events {
		m.Observe(e)
	}
	checks := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"claimed orders", m.events.WithLabelValues("orders", "claimed"), 4},
		{"claimed users", m.events.WithLabelValues("users", "claimed"), 2},
		{"sent orders", m.events.WithLabelValues("orders", "sent"), 1},
		{"retried orders", m.events.WithLabelValues("orders", "retried"), 1},
		{"fenced orders", m.events.WithLabelValues("orders", "fenced"), 1},
		{"abandoned orders", m.events.WithLabelValues("orders", "abandoned"), 1},
		{"failed users", m.events.WithLabelValues("users", "failed"), 1},
		{"released users", m.events.WithLabelValues("users", "released"), 1},
		{"sent users", m.events.WithLabelValues("users", "sent"), 0},
		{"leases lost", m.leasesLost, 4},
		{"janitor deleted", m.janitorDeleted, 1024},
		{"shards held", m.shardsHeld, 1},
	}
	for _, c := range checks {
		if got := value(t, c.c); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.claimDuration); n != 3 {
		t.Errorf("%d claim duration series, want 3 (lease, lock, ordered)", n)
	}
	if got := histogramCount(t, m.claimDuration, "lease"); got != 2 {
		t.Errorf("lease claims timed %v times, want 2", got)
	}

	// An outage: gauge, count and the state readiness reads.
	m.Observe(relay.Event{Kind: relay.EventOutageStarted, Err: "broker down", Rows: 7})
	if o := m.RelayOutage(); !o.Down || o.Cause != "broker down" || time.Since(o.Since) > time.Minute {
		t.Errorf("RelayOutage during an outage = %+v", o)
	}
	if value(t, m.relayOutage) != 1 || value(t, m.relayOutages) != 1 {
		t.Errorf("outage gauge %v, count %v; want 1, 1", value(t, m.relayOutage), value(t, m.relayOutages))
	}
	m.Observe(relay.Event{Kind: relay.EventOutageEnded, Rows: 7, Duration: time.Second})
	if o := m.RelayOutage(); o.Down {
		t.Errorf("RelayOutage after the outage = %+v", o)
	}
	if value(t, m.relayOutage) != 0 || value(t, m.relayOutages) != 1 {
		t.Errorf("after the outage: gauge %v, count %v; want 0, 1", value(t, m.relayOutage), value(t, m.relayOutages))
	}
}

// histogramCount returns the observation count of one series of h.
func histogramCount(t *testing.T, h *prometheus.HistogramVec, label string) uint64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	h.Collect(ch)
	close(ch)
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		for _, l := range d.GetLabel() {
			if l.GetValue() == label {
				return d.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// fakeSink answers each Publish with the next of its results (nil: all
// acknowledged) and each Probe with probeErr.
type fakeSink struct {
	mu       sync.Mutex
	results  []error
	probeErr error
	closed   bool
}

func (s *fakeSink) Publish(_ context.Context, msgs []outbox.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.results) == 0 {
		return nil
	}
	err := s.results[0]
	s.results = s.results[1:]
	return err
}

func (s *fakeSink) Close() error { s.closed = true; return nil }

type fakeProber struct{ fakeSink }

func (s *fakeProber) Probe(context.Context) error { return s.probeErr }

// The Publisher wrapper counts each message's result by topic, times and
// sizes each call, observes the age of acknowledged messages, follows the
// sink's outages, and keeps Prober only when the sink has it.
func TestPublisher(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	sink := &fakeProber{}
	transient := errors.New("timeout")
	sink.results = []error{
		nil, // batch 1: all acknowledged
		publishers.Errors{nil, publishers.Permanent(errors.New("too large")), transient}, // batch 2
		publishers.Unavailable(errors.New("connection refused")),                         // batch 3: down
	}
	p := m.Publisher("kafka", sink)
	if _, ok := p.(publishers.Prober); !ok {
		t.Fatal("a wrapped prober is not a publishers.Prober")
	}
	if _, ok := m.Publisher("plain", &fakeSink{}).(publishers.Prober); ok {
		t.Fatal("a wrapped sink without Probe is a publishers.Prober")
	}
	created := time.Now().Add(-2 * time.Second)
	msg := func(topic string) outbox.Message {
		return outbox.Message{Topic: topic, Payload: []byte("x"), CreatedAt: created}
	}
	ctx := context.Background()
	if err := p.Publish(ctx, []outbox.Message{msg("a"), msg("a"), msg("b")}); err != nil {
		t.Fatal(err)
	}
	err := p.Publish(ctx, []outbox.Message{msg("a"), msg("b"), msg("b")})
	var errs publishers.Errors
	if !errors.As(err, &errs) || len(errs) != 3 {
		t.Fatalf("the wrapper changed the sink's error: %v", err)
	}
	counts := map[[2]string]float64{
		{"a", ResultAcknowledged}: 3, {"b", ResultAcknowledged}: 1, {"b", ResultPermanent}: 1, {"b", ResultError}: 1,
		{"a", ResultUnavailable}: 0,
	}
	for k, want := range counts {
		if got := value(t, m.sinkMessages.WithLabelValues("kafka", k[0], k[1])); got != want {
			t.Errorf("sink messages {kafka,%s,%s} = %v, want %v", k[0], k[1], got, want)
		}
	}
	if got := histogramCount(t, m.batchSize, "kafka"); got != 2 {
		t.Errorf("batch sizes observed %d times, want 2", got)
	}
	if got := histogramCount(t, m.publishDuration, "kafka"); got != 2 {
		t.Errorf("publish durations observed %d times, want 2", got)
	}
	if got := histogramCount(t, m.ageAtPublish, "kafka"); got != 4 {
		t.Errorf("ages observed %d times, want 4 (the acknowledged messages)", got)
	}
	if got := histogramSum(t, m.ageAtPublish, "kafka"); got < 4*2 || got > 4*60 {
		t.Errorf("sum of ages %vs, want about 4 x 2s", got)
	}
	if value(t, m.sinkOutage.WithLabelValues("kafka")) != 0 {
		t.Error("in an outage before the sink reported itself down")
	}

	// The sink reports itself unavailable: an outage, counted once
	// however many calls fail; a failing probe keeps it; an answering
	// probe ends it.
	_ = p.Publish(ctx, []outbox.Message{msg("a")})
	sink.results = []error{publishers.Unavailable(errors.New("connection refused"))}
	_ = p.Publish(ctx, []outbox.Message{msg("a")})
	sink.probeErr = errors.New("dial: refused")
	_ = p.(publishers.Prober).Probe(ctx)
	if value(t, m.sinkOutage.WithLabelValues("kafka")) != 1 || value(t, m.sinkOutages.WithLabelValues("kafka")) != 1 {
		t.Errorf("during the outage: outage %v, outages %v; want 1, 1",
			value(t, m.sinkOutage.WithLabelValues("kafka")), value(t, m.sinkOutages.WithLabelValues("kafka")))
	}
	if got := value(t, m.sinkMessages.WithLabelValues("kafka", "a", ResultUnavailable)); got != 2 {
		t.Errorf("unavailable messages = %v, want 2", got)
	}
	sink.probeErr = nil
	_ = p.(publishers.Prober).Probe(ctx)
	if value(t, m.sinkOutage.WithLabelValues("kafka")) != 0 {
		t.Error("still in an outage after a probe answered")
	}
	// A cancelled call (shutdown) says nothing about the sink.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	sink.results = []error{context.Canceled}
	_ = p.Publish(cctx, []outbox.Message{msg("a"), msg("a")})
	if value(t, m.sinkOutage.WithLabelValues("kafka")) != 0 {
		t.Error("a cancelled publish started an outage")
	}
	if err := p.Close(); err != nil || !sink.closed {
		t.Errorf("Close: %v, closed %v", err, sink.closed)
	}
}

// histogramSum returns the sum of one series of h.
func histogramSum(t *testing.T, h *prometheus.HistogramVec, label string) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	h.Collect(ch)
	close(ch)
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		for _, l := range d.GetLabel() {
			if l.GetValue() == label {
				return d.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0
}

// backlogOf is a BacklogSource with fixed answers.
type backlogOf struct {
	b   relay.Backlog
	err error
}

func (s backlogOf) Backlog(context.Context, int64) (relay.Backlog, error) { return s.b, s.err }

// A backlog read sets the gauges of its table; a failed one counts an
// error and keeps them. Each table has its own series.
func TestReadBacklog(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	b := relay.Backlog{
		PendingDue:     relay.BacklogCount{Rows: 250000, Estimated: true},
		PendingDelayed: relay.BacklogCount{Rows: 12},
		Processing:     relay.BacklogCount{Rows: 100},
		Failed:         relay.BacklogCount{Rows: 3},
		OldestDue:      1500 * time.Millisecond,
		KeysBlocked:    2,
	}
	if err := m.ReadBacklog(context.Background(), backlogOf{b: b}, time.Second, 0); err != nil {
		t.Fatal(err)
	}
	other := relay.Backlog{PendingDue: relay.BacklogCount{Rows: 7}, OldestDue: 20 * time.Millisecond}
	if err := m.ReadTableBacklog(context.Background(), backlogOf{b: other}, "billing.outbox", time.Second, 0); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP outbox_backlog_rows ` + helpOf(t, reg, "outbox_backlog_rows") + `
# TYPE outbox_backlog_rows gauge
outbox_backlog_rows{state="failed",table="billing.outbox"} 0
outbox_backlog_rows{state="failed",table="public.outbox"} 3
outbox_backlog_rows{state="pending_delayed",table="billing.outbox"} 0
outbox_backlog_rows{state="pending_delayed",table="public.outbox"} 12
outbox_backlog_rows{state="pending_due",table="billing.outbox"} 7
outbox_backlog_rows{state="pending_due",table="public.outbox"} 250000
outbox_backlog_rows{state="processing",table="billing.outbox"} 0
outbox_backlog_rows{state="processing",table="public.outbox"} 100
`
	if err := testutil.CollectAndCompare(m.backlog.rows, strings.NewReader(want), "outbox_backlog_rows"); err != nil {
		t.Error(err)
	}
	const pub = DefaultBacklogTable
	for _, c := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"estimated pending_due", m.backlog.estimated.WithLabelValues(pub, StatePendingDue), 1},
		{"estimated failed", m.backlog.estimated.WithLabelValues(pub, StateFailed), 0},
		{"oldest due", m.backlog.oldestDue.WithLabelValues(pub), 1.5},
		{"oldest due, billing", m.backlog.oldestDue.WithLabelValues("billing.outbox"), 0.02},
		{"keys blocked", m.backlog.keysBlocked.WithLabelValues(pub), 2},
		{"limit", m.backlog.limit, DefaultBacklogLimit},
	} {
		if got := value(t, c.c); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	readAt := value(t, m.backlog.readAt.WithLabelValues(pub))
	if err := m.ReadBacklog(context.Background(), backlogOf{err: errors.New("connection refused")}, time.Second, 10); err == nil {
		t.Fatal("a failed read returned no error")
	}
	errs, billingErrs := value(t, m.backlog.readErrors.WithLabelValues(pub)), value(t, m.backlog.readErrors.WithLabelValues("billing.outbox"))
	if errs != 1 || billingErrs != 0 || value(t, m.backlog.readAt.WithLabelValues(pub)) != readAt || value(t, m.backlog.oldestDue.WithLabelValues(pub)) != 1.5 {
		t.Errorf("after a failed read: errors %v (billing.outbox %v), read at %v (was %v), oldest due %v",
			errs, billingErrs, value(t, m.backlog.readAt.WithLabelValues(pub)), readAt, value(t, m.backlog.oldestDue.WithLabelValues(pub)))
	}
}

// helpOf returns the help text of a registered family.
func helpOf(t *testing.T, reg *prometheus.Registry, name string) string {
	t.Helper()
	return family(t, reg, name).GetHelp()
}

type fakeKeyBatcher struct {
	fakeSink
	answer bool
}

func (s *fakeKeyBatcher) KeyBatches() bool { return s.answer }

type probingKeyBatcher struct{ fakeKeyBatcher }

func (s *probingKeyBatcher) Probe(context.Context) error { return nil }

// The measured sink answers publishers.KeyBatcher for the sink it wraps.
func TestPublisherKeyBatches(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	for _, tc := range []struct {
		name string
		sink publishers.Publisher
		want bool
	}{
		{"without KeyBatcher", &fakeSink{}, false},
		{"answering false", &fakeKeyBatcher{answer: false}, false},
		{"answering true", &fakeKeyBatcher{answer: true}, true},
		{"a prober answering true", &probingKeyBatcher{fakeKeyBatcher{answer: true}}, true},
	} {
		kb, ok := m.Publisher(tc.name, tc.sink).(publishers.KeyBatcher)
		if got := ok && kb.KeyBatches(); got != tc.want {
			t.Errorf("%s: measured sink answers %v, want %v", tc.name, got, tc.want)
		}
	}
}
