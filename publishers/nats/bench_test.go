package natssink_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
)

// BenchmarkPublish10k publishes 10,000 messages of 200 bytes (100 keys,
// fresh event ids) per operation to one stream on the local server: with
// the sink's Publish, and with the bare client doing what the sink does
// (the same headers, PublishMsgAsync with as many in flight, then every
// PubAck awaited), the sink's ceiling.
//
//	go test -run '^$' -bench Publish10k -benchtime 20x ./publishers/nats/
func BenchmarkPublish10k(b *testing.B) {
	const n = 10_000
	c := connect(b, serverURL())
	subject, _ := c.newStream(b, "bench", func(cfg *jetstream.StreamConfig) {
		cfg.MaxMsgs = 200_000 // the oldest go: the stream stays small however long the run
	})
	payload := []byte(strings.Repeat("x", 200))
	batch := func() []outbox.Message {
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{ID: uuid.New(), Topic: subject, Key: fmt.Appendf(nil, "key-%d", i%100), Payload: payload}
		}
		return msgs
	}
	report := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "msgs/s")
	}

	for _, inFlight := range []int{256, natssink.DefaultMaxInFlight, 4096} {
		b.Run(fmt.Sprintf("sink/max-in-flight=%d", inFlight), func(b *testing.B) {
			p := newPublisher(b, natssink.Config{URLs: []string{serverURL()}, MaxInFlight: inFlight})
			if err := p.Probe(testCtx(b, 10*time.Second)); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				b.StopTimer()
				msgs := batch()
				b.StartTimer()
				if err := p.Publish(testCtx(b, time.Minute), msgs); err != nil {
					b.Fatal(err)
				}
			}
			report(b, start)
		})
	}

	b.Run(fmt.Sprintf("bare/max-in-flight=%d", natssink.DefaultMaxInFlight), func(b *testing.B) {
		nc, err := nats.Connect(serverURL())
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(natssink.DefaultMaxInFlight))
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			b.StopTimer()
			msgs := batch()
			futures := make([]jetstream.PubAckFuture, 0, n)
			b.StartTimer()
			for i := range msgs {
				m := &msgs[i]
				id := m.ID.String()
				h := nats.Header{outbox.HeaderEventID: {id}, jetstream.MsgIDHeader: {id}, natssink.HeaderKey: {string(m.Key)}}
				f, err := js.PublishMsgAsync(&nats.Msg{Subject: m.Topic, Header: h, Data: m.Payload}, jetstream.WithStallWait(time.Minute))
				if err != nil {
					b.Fatal(err)
				}
				futures = append(futures, f)
			}
			for _, f := range futures {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
		}
		report(b, start)
	})
}
