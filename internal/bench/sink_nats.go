package bench

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
)

// natsCeiling publishes as publishers/nats does: PublishMsgAsync with the
// same headers and up to natssink.DefaultMaxInFlight unacknowledged, each
// PubAck awaited.
type natsCeiling struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func openNATSCeiling(ctx context.Context, url string) (ceiling, error) {
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
	return &natsCeiling{nc: nc, js: js}, nil
}

func (n *natsCeiling) publish(ctx context.Context, topic string, msgs []outbox.Message) error {
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

func (n *natsCeiling) close() error {
	n.nc.Close()
	return nil
}
