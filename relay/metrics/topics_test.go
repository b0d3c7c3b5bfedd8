package metrics

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
	"github.com/prometheus/client_golang/prometheus"
)

// topicValues returns the value of each topic label of family name,
// summed over its other labels.
func topicValues(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range family(t, reg, name).GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "topic" {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// The first MaxTopics topics get their own label value, later ones share
// OtherTopic; a topic that is not valid UTF-8, or empty, is InvalidTopic
// (client_golang panics on a label that is not UTF-8). Each metric has its
// own bound, and every count is kept.
func TestTopicLabelsAreBounded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{MaxTopics: 2})
	if err != nil {
		t.Fatal(err)
	}
	var topics []relay.TopicCount
	for _, topic := range []string{"a", "b", "c", "a", "acc.p\xffA", relay.InvalidTopic, "d", "", OtherTopic} {
		topics = append(topics, relay.TopicCount{Topic: topic, Claimed: 1})
	}
	m.Observe(relay.Event{Kind: relay.EventClaimed, Claim: relay.ClaimLease, Topics: topics})
	want := map[string]float64{"a": 2, "b": 1, OtherTopic: 3, InvalidTopic: 3}
	if got := topicValues(t, reg, "outbox_events_total"); !maps.Equal(got, want) {
		t.Errorf("outbox_events_total by topic = %v, want %v", got, want)
	}

	sink := m.Publisher("kafka", &fakeSink{})
	var msgs []outbox.Message
	for _, topic := range []string{"x", "\xff", "y", "", "z", "x", "b"} {
		msgs = append(msgs, outbox.Message{Topic: topic})
	}
	if err := sink.Publish(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	want = map[string]float64{"x": 2, "y": 1, OtherTopic: 2, InvalidTopic: 2}
	if got := topicValues(t, reg, "outbox_sink_messages_total"); !maps.Equal(got, want) {
		t.Errorf("outbox_sink_messages_total by topic = %v, want %v", got, want)
	}
	for _, fixed := range []string{OtherTopic, InvalidTopic} {
		if outbox.ValidateTopic(fixed) == nil {
			t.Errorf("%q is a valid topic: a topic's events could be mixed with the others", fixed)
		}
	}
}

// Bounded labels stay bounded under many topics from many goroutines.
func TestTopicLabelsConcurrent(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{MaxTopics: 10})
	if err != nil {
		t.Fatal(err)
	}
	sink := m.Publisher("stdout", &fakeSink{})
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				topic := strings.Repeat("t", 1+(g*200+i)%50)
				m.Observe(relay.Event{Kind: relay.EventRecorded, Topics: []relay.TopicCount{{Topic: topic, Sent: 1}}})
				_ = sink.Publish(context.Background(), []outbox.Message{{Topic: topic}})
			}
		}()
	}
	for range 4 {
		<-done
	}
	for _, name := range []string{"outbox_events_total", "outbox_sink_messages_total"} {
		got := topicValues(t, reg, name)
		total := 0.0
		for _, v := range got {
			total += v
		}
		if len(got) != 11 || got[OtherTopic] == 0 || total != 800 {
			t.Errorf("%s: %d topic labels (%v) adding up to %v; want 10 and %s, adding up to 800", name, len(got), slices.Sorted(maps.Keys(got)), total, OtherTopic)
		}
	}
}
