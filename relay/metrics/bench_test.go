package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
	"github.com/prometheus/client_golang/prometheus"
)

// nopSink acknowledges everything at once.
type nopSink struct{}

func (nopSink) Publish(context.Context, []outbox.Message) error { return nil }
func (nopSink) Close() error                                    { return nil }

// BenchmarkObserveBatch is what a batch costs the Observer: its claimed
// and recorded events, three topics.
func BenchmarkObserveBatch(b *testing.B) {
	m, err := New(prometheus.NewRegistry(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	claimed := relay.Event{Kind: relay.EventClaimed, Claim: relay.ClaimLease, Rows: 1000, Duration: time.Millisecond,
		Topics: []relay.TopicCount{{Topic: "orders", Claimed: 500}, {Topic: "users", Claimed: 300}, {Topic: "payments", Claimed: 200}}}
	recorded := relay.Event{Kind: relay.EventRecorded, Claim: relay.ClaimLease, Duration: time.Millisecond,
		Topics: []relay.TopicCount{{Topic: "orders", Claimed: 500, Sent: 500}, {Topic: "users", Claimed: 300, Sent: 300}, {Topic: "payments", Claimed: 200, Sent: 200}}}
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(claimed)
		m.Observe(recorded)
	}
}

// BenchmarkPublisher1000 is what the sink wrapper adds to a Publish of
// 1,000 messages of three topics, all acknowledged.
func BenchmarkPublisher1000(b *testing.B) {
	m, err := New(prometheus.NewRegistry(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := m.Publisher("kafka", nopSink{})
	msgs := make([]outbox.Message, 1000)
	topics := []string{"orders", "users", "payments"}
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: topics[i*3/len(msgs)], CreatedAt: time.Now()}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = p.Publish(ctx, msgs)
	}
}
