package jetstream_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/inbox/internal/adaptertest"
	inboxjs "github.com/outboxrelay/outboxrelay/inbox/jetstream"
	"github.com/outboxrelay/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
)

// serverURL is the NATS server with JetStream the tests use:
// OUTBOX_TEST_NATS_URL, or the one on this machine.
func serverURL() string {
	if u := os.Getenv("OUTBOX_TEST_NATS_URL"); u != "" {
		return u
	}
	return natssink.DefaultURL
}

func TestMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(serverURL())
	if err != nil {
		t.Fatalf("no NATS server at %s: %v", serverURL(), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	tag := uuid.NewString()[:8]
	subject, name := "outboxtest.inbox."+tag, "OUTBOXTEST_INBOX_"+tag
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	defer func() { _ = js.DeleteStream(context.Background(), name) }()
	sub, err := nc.SubscribeSync(subject) // a core subscriber sees the publishes too
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	p, err := natssink.New(natssink.Config{URLs: []string{serverURL()}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sent := adaptertest.Events(subject)
	adaptertest.Publish(t, p, sent)

	t.Run("jetstream.Msg", func(t *testing.T) {
		cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var got []inbox.Message
		for len(got) < len(sent) {
			batch, err := cons.Fetch(len(sent)-len(got), jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			for m := range batch.Messages() {
				im, err := inboxjs.Message(m)
				if err != nil {
					t.Fatalf("Message: %v", err)
				}
				got = append(got, im)
			}
			if err := batch.Error(); err != nil {
				t.Fatalf("Fetch: %v", err)
			}
		}
		adaptertest.Check(t, got, sent, subject, 0)
	})
	t.Run("*nats.Msg", func(t *testing.T) {
		var got []inbox.Message
		for range sent {
			m, err := sub.NextMsgWithContext(ctx)
			if err != nil {
				t.Fatalf("NextMsg: %v", err)
			}
			im, err := inboxjs.CoreMessage(m)
			if err != nil {
				t.Fatalf("CoreMessage: %v", err)
			}
			got = append(got, im)
		}
		adaptertest.Check(t, got, sent, subject, 0)
	})
}

func TestMessageWithoutEventID(t *testing.T) {
	for name, h := range map[string]nats.Header{
		"no header":   nil,
		"Nats-Msg-Id": {jetstream.MsgIDHeader: {uuid.NewString()}},
		"not a UUID":  {outbox.HeaderEventID: {"order-1"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := inboxjs.CoreMessage(&nats.Msg{Subject: "orders", Header: h, Data: []byte("x")})
			if !errors.Is(err, inbox.ErrNoEventID) {
				t.Errorf("error %v, want one wrapping inbox.ErrNoEventID", err)
			}
		})
	}
}
