package pubsubsink_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
	pubsubsink "github.com/outboxrelay/outboxrelay/publishers/pubsub"
)

// project is the project of the tests' topics on the fake.
const project = "outbox-test"

// fake is an in-process Pub/Sub fake (pstest) on 127.0.0.1.
type fake struct{ srv *pstest.Server }

// startFake starts a fake, closed at the end of the test.
func startFake(t testing.TB) *fake {
	t.Helper()
	srv := pstest.NewServerWithAddress("127.0.0.1:0")
	t.Cleanup(func() { _ = srv.Close() })
	return &fake{srv: srv}
}

var topicSeq atomic.Int64

// newTopic creates a topic of its own for the test and returns its id.
func (f *fake) newTopic(t testing.TB, base string) string {
	t.Helper()
	id := fmt.Sprintf("%s-%d", base, topicSeq.Add(1))
	if _, err := f.srv.GServer.CreateTopic(context.Background(), &pubsubpb.Topic{Name: topicName(id)}); err != nil {
		t.Fatalf("create topic %s: %v", id, err)
	}
	return id
}

func topicName(id string) string { return "projects/" + project + "/topics/" + id }

// records returns what the fake stored for topic, in the order it stored
// them; a record's Stream is its ordering key.
func (f *fake) records(t testing.TB, topic string) []publisherstest.Record {
	t.Helper()
	var out []publisherstest.Record
	for _, m := range f.srv.Messages() {
		if m.Topic != topicName(topic) {
			continue
		}
		key, err := pubsubsink.Key(m.Attributes)
		if err != nil {
			t.Errorf("message %s: %v", m.ID, err)
		}
		headers := map[string]string{}
		for name, value := range m.Attributes {
			if name != pubsubsink.AttrKey && name != pubsubsink.AttrKeyBase64 {
				headers[name] = value
			}
		}
		out = append(out, publisherstest.Record{
			Topic: topic, Stream: m.OrderingKey, Key: key, Value: m.Data,
			Headers: headers, EventID: m.Attributes[outbox.HeaderEventID],
		})
	}
	return out
}

// newPublisher returns a Publisher of the fake at addr, closed at the end
// of the test.
func newPublisher(t testing.TB, addr string, mod ...func(*pubsubsink.Config)) *pubsubsink.Publisher {
	t.Helper()
	cfg := pubsubsink.Config{Project: project, Endpoint: addr}
	for _, f := range mod {
		f(&cfg)
	}
	p, err := pubsubsink.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// unknownTopic is a topic id no test creates.
func unknownTopic() string {
	return fmt.Sprintf("missing-%d", topicSeq.Add(1))
}
