package cloudevents

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

type memSink struct{ got []outbox.Message }

func (s *memSink) Publish(_ context.Context, msgs []outbox.Message) error {
	s.got = append(s.got, msgs...)
	return nil
}
func (s *memSink) Close() error     { return nil }
func (s *memSink) KeyBatches() bool { return true }

type probingSink struct{ memSink }

func (s *probingSink) Probe(context.Context) error { return nil }

// Wrap converts what it publishes, fails permanently the message it cannot
// convert and publishes the others, forwards Probe exactly when the sink
// has it, answers KeyBatches for the sink, and refuses a bad Config.
func TestWrap(t *testing.T) {
	sink := &memSink{}
	p, err := Wrap(sink, Config{Mode: ModeStructured, Binding: Kafka})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(publishers.Prober); ok {
		t.Error("the wrapper of a sink without Probe has one")
	}
	if kb, ok := p.(publishers.KeyBatcher); !ok || !kb.KeyBatches() {
		t.Error("KeyBatches is not forwarded")
	}
	bad := outbox.Message{ID: uuid.New(), Topic: "t", Headers: map[string]string{"ce-id": "x"}}
	good := outbox.Message{ID: uuid.New(), Topic: "t", Payload: []byte(`1`)}
	res := publishers.PerMessage(p.Publish(context.Background(), []outbox.Message{bad, good}), 2)
	if !publishers.IsPermanent(res[0]) || res[1] != nil || len(sink.got) != 1 || sink.got[0].Headers["content-type"] != ContentTypeStructured {
		t.Errorf("results %v, published %+v", res, sink.got)
	}
	if p, _ := Wrap(&probingSink{}, Config{Mode: ModeBinary, Binding: HTTP}); p == nil {
		t.Fatal("no wrapper")
	} else if _, ok := p.(publishers.Prober); !ok {
		t.Error("Probe is not forwarded")
	}
	if _, err := Wrap(sink, Config{Mode: ModeBinary, Binding: Kinesis}); err == nil {
		t.Error("binary mode on Kinesis was taken")
	}
}
