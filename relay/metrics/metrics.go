package metrics

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/relay"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure New. The zero value is valid.
type Options struct {
	// Version is the value of outbox_build_info's version label. Defaults
	// to "unknown".
	Version string
	// MaxTopics is how many topics get their own topic label value in
	// outbox_events_total, and as many in outbox_sink_messages_total (the
	// first ones seen): later topics are counted under OtherTopic, so that
	// the number of series stays bounded. Defaults to 100
	// (DefaultMaxTopics).
	MaxTopics int
}

// Outcomes of outbox_events_total, besides claimed: the fields of
// relay.TopicCount.
const (
	OutcomeClaimed   = "claimed"
	OutcomeSent      = "sent"
	OutcomeRetried   = "retried"
	OutcomeFailed    = "failed"
	OutcomeReleased  = "released"
	OutcomeFenced    = "fenced"
	OutcomeAbandoned = "abandoned"
)

// Metrics holds a relay's Prometheus metrics. It is a relay.Observer; its
// methods are safe for concurrent use, and one Metrics may observe several
// relays of a process (their figures add up).
type Metrics struct {
	events          *prometheus.CounterVec
	claimDuration   *prometheus.HistogramVec
	recordDuration  *prometheus.HistogramVec
	leasesLost      prometheus.Counter
	janitorDeleted  prometheus.Counter
	relayOutage     prometheus.Gauge
	relayOutages    prometheus.Counter
	shardsHeld      prometheus.Gauge
	sinkMessages    *prometheus.CounterVec
	publishDuration *prometheus.HistogramVec
	batchSize       *prometheus.HistogramVec
	ageAtPublish    *prometheus.HistogramVec
	sinkOutage      *prometheus.GaugeVec
	sinkOutages     *prometheus.CounterVec
	backlog         backlogGauges

	// topics caches each topic label's outbox_events_total counters: a
	// batch then costs one map lookup per topic instead of one per
	// outcome. eventTopics and sinkTopics give the label values of
	// outbox_events_total and outbox_sink_messages_total.
	topics                  sync.Map // string -> *topicCounters
	eventTopics, sinkTopics *topicLabels

	mu     sync.Mutex
	outage Outage // the relay's, from its events
}

// topicCounters are one topic's outbox_events_total series.
type topicCounters struct {
	claimed, sent, retried, failed, released, fenced, abandoned prometheus.Counter
}

// Outage is the state of a relay's sink as the relay saw it last: Down
// from the EventOutageStarted that paused its claims until the
// EventOutageEnded that resumed them.
type Outage struct {
	Down  bool
	Since time.Time // when it started, while Down
	Cause string    // the sink's error that started it
}

// Buckets of the histograms, in seconds or messages.
var (
	// durationBuckets: 0.5ms to 32s, doubling.
	durationBuckets = prometheus.ExponentialBuckets(0.0005, 2, 17)
	// batchBuckets: messages per Publish.
	batchBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000}
	// ageBuckets: 1ms to a day; an outage or a retry shows in the top ones.
	ageBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400}
)

// New creates the metrics and registers them with reg
// (prometheus.DefaultRegisterer, or a registry of your own). It fails,
// registering none, when reg refuses one, e.g. because a Metrics is
// registered with it already.
func New(reg prometheus.Registerer, opts Options) (*Metrics, error) {
	if opts.Version == "" {
		opts.Version = "unknown"
	}
	if opts.MaxTopics <= 0 {
		opts.MaxTopics = DefaultMaxTopics
	}
	m := &Metrics{
		eventTopics: newTopicLabels(opts.MaxTopics),
		sinkTopics:  newTopicLabels(opts.MaxTopics),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_events_total",
			Help: "Outbox rows by topic and outcome: claimed; then, once the outcome is written, sent, retried (including rows deferred by a sink outage, whose attempt is given back), failed, released (back to pending at once: shutdown, or waiting behind their key's head in ordered delivery), fenced (another claim held them by then) or abandoned (the publish did not return; they come back when their lease ends).",
		}, []string{"topic", "outcome"}),
		claimDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outbox_claim_duration_seconds",
			Help:    "Time of one claim statement, including claims that found nothing, by claim: lease, lock or ordered.",
			Buckets: durationBuckets,
		}, []string{"claim"}),
		recordDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outbox_record_duration_seconds",
			Help:    "Time to write one batch's outcome back, by claim: lease, lock or ordered.",
			Buckets: durationBuckets,
		}, []string{"claim"}),
		leasesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_leases_lost_total",
			Help: "Rows whose lease a renewal found taken by another claim while they were being published: they may be published twice.",
		}),
		janitorDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_janitor_deleted_rows_total",
			Help: "Sent rows the retention janitor of this process deleted.",
		}),
		relayOutage: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_sink_outage",
			Help: "1 while the relay found its publisher (the sink, or the router over the sinks) down and claims nothing until it answers; else 0.",
		}),
		relayOutages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_sink_outages_total",
			Help: "Outages that paused the relay's claims.",
		}),
		shardsHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_ordered_shards_held",
			Help: "Ordered shards this process's relays hold a lease on now.",
		}),
		sinkMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_sink_messages_total",
			Help: "Messages handed to a sink, by sink, topic (as published: the destination under --route) and result: acknowledged, unavailable (the sink reported itself down), permanent (refused for good), or error (another, transient failure).",
		}, []string{"sink", "topic", "result"}),
		publishDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outbox_publish_duration_seconds",
			Help:    "Time of one Publish call on a sink, until every message of it was acknowledged or failed.",
			Buckets: durationBuckets,
		}, []string{"sink"}),
		batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outbox_publish_batch_size",
			Help:    "Messages per Publish call on a sink.",
			Buckets: batchBuckets,
		}, []string{"sink"}),
		ageAtPublish: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outbox_event_age_at_publish_seconds",
			Help:    "From an event's created_at (the database clock at the insert) to its acknowledgement by the sink (this process's clock), per acknowledged message.",
			Buckets: ageBuckets,
		}, []string{"sink"}),
		sinkOutage: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_sink_outage",
			Help: "1 while a sink is in an outage as its own calls see it: from a Publish that had nothing acknowledged and reported the sink unavailable (or two or more transient failures), or a failed probe, until a message is acknowledged or refused for good or a probe answers; else 0.",
		}, []string{"sink"}),
		sinkOutages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_sink_outages_total",
			Help: "Outages of a sink (outbox_sink_outage going from 0 to 1).",
		}, []string{"sink"}),
		backlog: newBacklogGauges(),
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "outbox_build_info",
		Help:        "Always 1; the version label is the relay's.",
		ConstLabels: prometheus.Labels{"version": opts.Version},
	})
	buildInfo.Set(1)
	collectors := []prometheus.Collector{
		m.events, m.claimDuration, m.recordDuration, m.leasesLost, m.janitorDeleted, m.relayOutage, m.relayOutages,
		m.shardsHeld, m.sinkMessages, m.publishDuration, m.batchSize, m.ageAtPublish, m.sinkOutage, m.sinkOutages, buildInfo,
	}
	collectors = append(collectors, m.backlog.collectors()...)
	var (
		errs []error
		done []prometheus.Collector
	)
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, c)
	}
	if err := errors.Join(errs...); err != nil {
		for _, c := range done { // all or nothing
			reg.Unregister(c)
		}
		return nil, fmt.Errorf("metrics: register: %w", err)
	}
	// Claims are timed by kind from the start, so that dashboards see
	// every series at 0 rather than none.
	for _, c := range []relay.ClaimMode{relay.ClaimLease, relay.ClaimLock, relay.ClaimOrdered} {
		m.claimDuration.WithLabelValues(string(c))
	}
	return m, nil
}

// Observe counts e. It implements relay.Observer.
func (m *Metrics) Observe(e relay.Event) {
	switch e.Kind {
	case relay.EventClaimed:
		m.claimDuration.WithLabelValues(string(e.Claim)).Observe(e.Duration.Seconds())
		for _, t := range e.Topics {
			m.topic(t.Topic).claimed.Add(float64(t.Claimed))
		}
	case relay.EventRecorded:
		m.recordDuration.WithLabelValues(string(e.Claim)).Observe(e.Duration.Seconds())
		for _, t := range e.Topics {
			c := m.topic(t.Topic)
			add(c.sent, t.Sent)
			add(c.retried, t.Retried)
			add(c.failed, t.Failed)
			add(c.released, t.Released)
			add(c.fenced, t.Fenced)
			add(c.abandoned, t.Abandoned)
		}
	case relay.EventLeaseLost:
		m.leasesLost.Add(float64(e.Rows))
	case relay.EventOutageStarted:
		m.mu.Lock()
		m.outage = Outage{Down: true, Since: time.Now(), Cause: e.Err}
		m.mu.Unlock()
		m.relayOutage.Set(1)
		m.relayOutages.Inc()
	case relay.EventOutageEnded:
		m.mu.Lock()
		m.outage = Outage{}
		m.mu.Unlock()
		m.relayOutage.Set(0)
	case relay.EventJanitorRan:
		m.janitorDeleted.Add(float64(e.Rows))
	case relay.EventShardLeased:
		m.shardsHeld.Inc()
	case relay.EventShardHandedBack:
		m.shardsHeld.Dec()
	}
}

// add adds n to c unless n is 0.
func add(c prometheus.Counter, n int) {
	if n != 0 {
		c.Add(float64(n))
	}
}

// topic returns the counters of topic's label, creating them at its
// first event.
func (m *Metrics) topic(topic string) *topicCounters {
	if c, ok := m.topics.Load(topic); ok {
		return c.(*topicCounters)
	}
	label := m.eventTopics.of(topic)
	if c, ok := m.topics.Load(label); ok {
		return c.(*topicCounters)
	}
	with := func(outcome string) prometheus.Counter { return m.events.WithLabelValues(label, outcome) }
	c := &topicCounters{
		claimed: with(OutcomeClaimed), sent: with(OutcomeSent), retried: with(OutcomeRetried), failed: with(OutcomeFailed),
		released: with(OutcomeReleased), fenced: with(OutcomeFenced), abandoned: with(OutcomeAbandoned),
	}
	actual, _ := m.topics.LoadOrStore(label, c)
	return actual.(*topicCounters)
}

// RelayOutage returns the state of the relay's sink as its events last
// reported it (all relays observed, when several are): readiness checks
// use it.
func (m *Metrics) RelayOutage() Outage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.outage
}
