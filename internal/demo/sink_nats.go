package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
)

// NATSConfig is how the demo reaches NATS: the NATS sink's URL and
// credentials.
type NATSConfig struct {
	// URLs are the servers, nats://host:port. Defaults to
	// natssink.DefaultURL.
	URLs []string
	// CredentialsFile, User and Password, or Token authenticate, as the
	// sink's do. Default to none.
	CredentialsFile, User, Password, Token string
}

// NATS is the demo's NATS JetStream: Open creates a stream capturing the
// topic as its subject, read back with an ordered consumer; Close deletes
// the stream.
type NATS struct {
	cfg    NATSConfig
	nc     *nats.Conn
	js     jetstream.JetStream
	stream string
	cc     jetstream.ConsumeContext
}

// NewNATS returns the demo's NATS; it connects in Open.
func NewNATS(cfg NATSConfig) *NATS {
	if len(cfg.URLs) == 0 {
		cfg.URLs = []string{natssink.DefaultURL}
	}
	return &NATS{cfg: cfg}
}

// Open creates the stream OUTBOX_DEMO_<topic's letters and digits>, which
// captures the subject topic, and consumes it from its first message.
func (n *NATS) Open(ctx context.Context, topic string, got func(Received)) (string, error) {
	opts := []nats.Option{nats.Name("outboxrelay-demo"), nats.Timeout(5 * time.Second)}
	switch {
	case n.cfg.CredentialsFile != "":
		opts = append(opts, nats.UserCredentials(n.cfg.CredentialsFile))
	case n.cfg.User != "":
		opts = append(opts, nats.UserInfo(n.cfg.User, n.cfg.Password))
	case n.cfg.Token != "":
		opts = append(opts, nats.Token(n.cfg.Token))
	}
	nc, err := nats.Connect(strings.Join(n.cfg.URLs, ","), opts...)
	if err != nil {
		return "", fmt.Errorf("cannot reach NATS at %s (start nats-server -js, or pass --nats-url): %w", strings.Join(n.cfg.URLs, ","), err)
	}
	n.nc = nc
	if n.js, err = jetstream.New(nc); err != nil {
		return "", fmt.Errorf("nats: %w", err)
	}
	name := "OUTBOX_DEMO_" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, topic)
	s, err := n.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{topic}, Storage: jetstream.FileStorage})
	if err != nil {
		return "", fmt.Errorf("nats: create stream %s capturing %s (is JetStream enabled: nats-server -js?): %w", name, topic, err)
	}
	n.stream = name
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return "", fmt.Errorf("nats: consumer of stream %s: %w", name, err)
	}
	n.cc, err = cons.Consume(func(m jetstream.Msg) {
		h := m.Headers()
		key, _ := natssink.Key(h) // a bad key header arrives as a wrong key: corrupted
		got(Received{EventID: h.Get(outbox.HeaderEventID), Key: string(key), Payload: string(m.Data())})
	})
	if err != nil {
		return "", fmt.Errorf("nats: consume stream %s: %w", name, err)
	}
	return fmt.Sprintf("nats:     %s, JetStream stream %s capturing subject %s", nc.ConnectedUrlRedacted(), name, topic), nil
}

// Close stops the consumer, deletes the stream and disconnects.
func (n *NATS) Close() error {
	if n.cc != nil {
		n.cc.Stop()
		<-n.cc.Closed()
	}
	var err error
	if n.stream != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err = n.js.DeleteStream(ctx, n.stream); err != nil {
			err = fmt.Errorf("nats: delete stream %s: %w", n.stream, err)
		}
	}
	if n.nc != nil {
		n.nc.Close()
	}
	return err
}
