package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
)

// natsSink is the NATS JetStream sink: each run's topic is a subject,
// captured by a stream of its own (file storage, the server's defaults
// otherwise), read back by an ordered consumer. The ceiling publishes as
// publishers/nats does: PublishMsgAsync with the same headers and up to
// natssink.DefaultMaxInFlight unacknowledged, each PubAck awaited.
type natsSink struct {
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
}

func openNATS(ctx context.Context, url string) (*natsSink, error) {
	nc, err := nats.Connect(url, nats.Name("relay-bench"), nats.NoReconnect())
	if err != nil {
		return nil, fmt.Errorf("nats: cannot reach %s (start nats-server -js, or pass --sink-url): %w", redactURL(url), err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(natssink.DefaultMaxInFlight))
	if err == nil {
		_, err = js.AccountInfo(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: JetStream at %s: %w", redactURL(url), err)
	}
	return &natsSink{url: url, nc: nc, js: js}, nil
}

// natsStream names the stream of topic: stream names cannot hold '.'.
func natsStream(topic string) string { return strings.ReplaceAll(topic, ".", "_") }

func (n *natsSink) relayArgs() []string { return []string{"--sink", "nats"} }
func (n *natsSink) relayEnv() []string  { return []string{"OUTBOX_NATS_URL=" + n.url} }

func (n *natsSink) prepare(ctx context.Context, topic string) error {
	_, err := n.js.CreateStream(ctx, jetstream.StreamConfig{Name: natsStream(topic), Subjects: []string{topic}, Storage: jetstream.FileStorage})
	if err != nil {
		return fmt.Errorf("nats: create stream for %s: %w", topic, err)
	}
	return nil
}

func (n *natsSink) cleanup(ctx context.Context, topic string) error {
	if err := n.js.DeleteStream(ctx, natsStream(topic)); err != nil {
		return fmt.Errorf("nats: delete stream of %s: %w", topic, err)
	}
	return nil
}

// natsReadIdle bounds a read-back that makes no progress.
const natsReadIdle = 10 * time.Second

func (n *natsSink) read(ctx context.Context, topic string, follow bool, a *arrivals, ready func()) error {
	var want uint64
	if !follow {
		s, err := n.js.Stream(ctx, natsStream(topic))
		if err != nil {
			return fmt.Errorf("nats: stream of %s: %w", topic, err)
		}
		want = s.CachedInfo().State.Msgs
		if want == 0 {
			return nil
		}
	}
	cons, err := n.js.OrderedConsumer(ctx, natsStream(topic), jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("nats: consumer of %s: %w", topic, err)
	}
	var mu sync.Mutex
	var got uint64
	progress := make(chan struct{}, 1)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		at := time.Now()
		id, _ := uuid.Parse(m.Headers().Get(outbox.HeaderEventID))
		a.add([]uuid.UUID{id}, at)
		mu.Lock()
		got++
		mu.Unlock()
		select {
		case progress <- struct{}{}:
		default:
		}
	}, jetstream.PullMaxMessages(1000))
	if err != nil {
		return fmt.Errorf("nats: consume %s: %w", topic, err)
	}
	defer cc.Stop()
	if ready != nil {
		ready()
	}
	if follow {
		<-ctx.Done()
		return nil
	}
	idle := time.NewTimer(natsReadIdle)
	defer idle.Stop()
	for {
		mu.Lock()
		done := got >= want
		mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-progress:
			idle.Reset(natsReadIdle)
		case <-idle.C:
			return fmt.Errorf("nats: read %d of the %d messages of %s, then nothing for %v", got, want, topic, natsReadIdle)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (n *natsSink) publish(ctx context.Context, topic string, msgs []outbox.Message) error {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		id := m.ID.String()
		h := nats.Header{outbox.HeaderEventID: {id}, jetstream.MsgIDHeader: {id}, natssink.HeaderKey: {string(m.Key)}}
		f, err := n.js.PublishMsgAsync(&nats.Msg{Subject: topic, Header: h, Data: m.Payload}, jetstream.WithStallWait(natssink.DefaultPublishTimeout))
		if err != nil {
			return fmt.Errorf("nats: publish: %w", err)
		}
		futures = append(futures, f)
	}
	var errs []error
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs = append(errs, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("nats: %d messages not acknowledged, the first: %w", len(errs), errs[0])
	}
	return nil
}

func (n *natsSink) settings(s *Settings) { s.Sink, s.SinkURL = SinkNATS, redactURL(n.url) }

func (n *natsSink) close() error {
	n.nc.Close()
	return nil
}

var _ ceilingSink = (*natsSink)(nil)
