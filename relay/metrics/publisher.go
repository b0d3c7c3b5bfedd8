package metrics

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/prometheus/client_golang/prometheus"
)

// Results of outbox_sink_messages_total.
const (
	ResultAcknowledged = "acknowledged"
	ResultUnavailable  = "unavailable"
	ResultPermanent    = "permanent"
	ResultError        = "error"
)

// Publisher returns p measured under the name sink: each Publish call's
// duration and size, each message's result by topic, each acknowledged
// message's age (from Message.CreatedAt, which the relay sets), and the
// sink's outage state. The result implements publishers.Prober when p does,
// and measures nothing else: Publish's results and errors are p's.
func (m *Metrics) Publisher(sink string, p publishers.Publisher) publishers.Publisher {
	s := &sinkMetrics{
		m: m, name: sink,
		duration: m.publishDuration.WithLabelValues(sink),
		size:     m.batchSize.WithLabelValues(sink),
		age:      m.ageAtPublish.WithLabelValues(sink),
		outage:   m.sinkOutage.WithLabelValues(sink),
		outages:  m.sinkOutages.WithLabelValues(sink),
	}
	s.outage.Set(0)
	mp := &measured{p: p, s: s}
	if pr, ok := p.(publishers.Prober); ok {
		return &measuredProber{measured: mp, pr: pr}
	}
	return mp
}

// sinkMetrics are one sink's series, and its outage state.
type sinkMetrics struct {
	m                   *Metrics
	name                string
	duration, size, age prometheus.Observer
	outage              prometheus.Gauge
	outages             prometheus.Counter
	topics              sync.Map // topic label -> *[4]prometheus.Counter, by result

	mu   sync.Mutex
	down bool
}

// resultOf is the result label of each publishers.Class.
var resultOf = [4]string{
	publishers.ClassAcknowledged: ResultAcknowledged,
	publishers.ClassTransient:    ResultError,
	publishers.ClassUnavailable:  ResultUnavailable,
	publishers.ClassPermanent:    ResultPermanent,
}

// results returns the outbox_sink_messages_total counters of topic's
// label, indexed by publishers.Class.
func (s *sinkMetrics) results(topic string) *[4]prometheus.Counter {
	if c, ok := s.topics.Load(topic); ok {
		return c.(*[4]prometheus.Counter)
	}
	label := s.m.sinkTopics.of(topic)
	if c, ok := s.topics.Load(label); ok {
		return c.(*[4]prometheus.Counter)
	}
	c := &[4]prometheus.Counter{}
	for i, r := range resultOf {
		c[i] = s.m.sinkMessages.WithLabelValues(s.name, label, r)
	}
	actual, _ := s.topics.LoadOrStore(label, c)
	return actual.(*[4]prometheus.Counter)
}

// setDown records the sink's outage state; going down counts an outage.
func (s *sinkMetrics) setDown(down bool) {
	s.mu.Lock()
	changed := s.down != down
	s.down = down
	s.mu.Unlock()
	if !changed {
		return
	}
	if down {
		s.outage.Set(1)
		s.outages.Inc()
		return
	}
	s.outage.Set(0)
}

// measured is a measured publishers.Publisher.
type measured struct {
	p publishers.Publisher
	s *sinkMetrics
}

// Publish publishes msgs with the wrapped sink and measures the call.
func (w *measured) Publish(ctx context.Context, msgs []outbox.Message) error {
	start := time.Now()
	err := w.p.Publish(ctx, msgs)
	end := time.Now()
	s := w.s
	s.duration.Observe(end.Sub(start).Seconds())
	s.size.Observe(float64(len(msgs)))
	// Count per topic in runs: a batch's messages mostly share a topic.
	var (
		runTopic string
		run      [4]int
	)
	flush := func() {
		if runTopic == "" && run == [4]int{} {
			return
		}
		c := s.results(runTopic)
		for i, n := range run {
			if n > 0 {
				c[i].Add(float64(n))
			}
		}
		run = [4]int{}
	}
	var results []error
	if err != nil {
		results = publishers.PerMessage(err, len(msgs))
	}
	acked, refused, unavailable, transient := false, false, false, 0
	for i := range msgs {
		if msgs[i].Topic != runTopic {
			flush()
			runTopic = msgs[i].Topic
		}
		var e error
		if results != nil {
			e = results[i]
		}
		// Classified as the relay does: a permanent error wins over an
		// unavailable one inside it.
		class := publishers.ClassOf(e)
		run[class]++
		switch class {
		case publishers.ClassAcknowledged:
			acked = true
			if !msgs[i].CreatedAt.IsZero() {
				s.age.Observe(end.Sub(msgs[i].CreatedAt).Seconds())
			}
		case publishers.ClassUnavailable:
			unavailable = true
		case publishers.ClassPermanent:
			refused = true
		default:
			transient++
		}
	}
	flush()
	// The relay's rule for a sink that is down (relay.ProcessBatch):
	// nothing acknowledged, and the sink said it is unavailable or
	// several messages failed transiently. An answer about a message (an
	// acknowledgement, a permanent refusal) says it is up. A call whose
	// context was cancelled (shutdown) says nothing; one that ran out of
	// time does.
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
	case acked || refused:
		s.setDown(false)
	case unavailable || transient >= 2:
		s.setDown(true)
	}
	return err
}

// Close closes the wrapped sink.
func (w *measured) Close() error { return w.p.Close() }

// KeyBatches answers for the wrapped sink (publishers.KeyBatcher): measuring
// changes nothing about which messages it sends.
func (w *measured) KeyBatches() bool {
	kb, ok := w.p.(publishers.KeyBatcher)
	return ok && kb.KeyBatches()
}

// measuredProber is a measured sink that can be probed.
type measuredProber struct {
	*measured
	pr publishers.Prober
}

// Probe probes the wrapped sink: an answer ends its outage, an error
// starts one.
func (w *measuredProber) Probe(ctx context.Context) error {
	err := w.pr.Probe(ctx)
	if err == nil || !errors.Is(ctx.Err(), context.Canceled) {
		w.s.setDown(err != nil)
	}
	return err
}
