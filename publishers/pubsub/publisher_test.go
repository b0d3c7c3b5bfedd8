package pubsubsink_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	pubsubsink "github.com/outboxrelay/outboxrelay/publishers/pubsub"
)

func message(topic string, key []byte, payload string) outbox.Message {
	return outbox.Message{ID: uuid.New(), Topic: topic, Key: key, Payload: []byte(payload)}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestFailedKeyIsResumed: a failed request pauses its ordering key in the
// client; Publish resumes it, so that the key's next call goes out
// instead of failing with pubsub.ErrPublishingPaused.
func TestFailedKeyIsResumed(t *testing.T) {
	t.Parallel()
	f := startFake(t)
	p := newPublisher(t, f.srv.Addr)
	topic := unknownTopic()
	first := []outbox.Message{message(topic, []byte("k"), "1"), message(topic, []byte("k"), "2")}
	for i, err := range publishers.PerMessage(p.Publish(testCtx(t), first), 2) {
		if !publishers.IsPermanent(err) || !errors.Is(err, pubsubsink.ErrNoTopic) {
			t.Fatalf("message %d to a missing topic: %v, want permanent ErrNoTopic", i, err)
		}
	}
	if _, err := f.srv.GServer.CreateTopic(t.Context(), &pubsubpb.Topic{Name: topicName(topic)}); err != nil {
		t.Fatal(err)
	}
	again := []outbox.Message{message(topic, []byte("k"), "3")}
	if err := p.Publish(testCtx(t), again); err != nil {
		t.Fatalf("the key's next Publish once the topic exists: %v (was the key resumed?)", err)
	}
	if recs := f.records(t, topic); len(recs) != 1 || recs[0].EventID != again[0].ID.String() {
		t.Fatalf("records %+v, want the one event %s", recs, again[0].ID)
	}
}

// TestKeys: a UTF-8 key is the ordering key and the AttrKey attribute; a
// key that is not UTF-8 travels in base64; no key, no ordering key.
func TestKeys(t *testing.T) {
	t.Parallel()
	f := startFake(t)
	p := newPublisher(t, f.srv.Addr)
	topic := f.newTopic(t, "keys")
	binary := []byte{0xff, 0x00, 'k'}
	msgs := []outbox.Message{message(topic, []byte("order-1"), "a"), message(topic, binary, "b"), message(topic, nil, "c")}
	if err := p.Publish(testCtx(t), msgs); err != nil {
		t.Fatal(err)
	}
	recs := f.records(t, topic)
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	for _, r := range recs {
		switch string(r.Value) {
		case "a":
			if string(r.Key) != "order-1" || r.Stream != "order-1" {
				t.Errorf("key %q ordering key %q, want order-1 for both", r.Key, r.Stream)
			}
		case "b":
			if !bytes.Equal(r.Key, binary) || r.Stream != "/wBr" {
				t.Errorf("binary key arrived as %q, ordering key %q", r.Key, r.Stream)
			}
		case "c":
			if r.Key != nil || r.Stream != "" {
				t.Errorf("no key arrived as %q, ordering key %q", r.Key, r.Stream)
			}
		}
	}
}

// TestInvalidHeaders: headers the service would refuse fail their message
// permanently, before sending, and the others go.
func TestInvalidHeaders(t *testing.T) {
	t.Parallel()
	f := startFake(t)
	p := newPublisher(t, f.srv.Addr)
	topic := f.newTopic(t, "headers")
	ok := message(topic, []byte("k"), "ok")
	ok.Headers = map[string]string{"trace": "x"}
	bad := message(topic, []byte("k"), "bad")
	bad.Headers = map[string]string{"googBad": "x"}
	long := message(topic, nil, "long")
	long.Headers = map[string]string{"v": string(bytes.Repeat([]byte{'v'}, 1025))}
	errs := publishers.PerMessage(p.Publish(testCtx(t), []outbox.Message{ok, bad, long}), 3)
	if errs[0] != nil || !errors.Is(errs[1], pubsubsink.ErrInvalidMessage) || !publishers.IsPermanent(errs[2]) {
		t.Fatalf("results %v, want nil, permanent, permanent", errs)
	}
}

// TestConfig: New refuses a config without a project.
func TestConfig(t *testing.T) {
	if _, err := pubsubsink.New(pubsubsink.Config{Endpoint: "127.0.0.1:1"}); !errors.Is(err, pubsubsink.ErrInvalidConfig) {
		t.Fatalf("New without a project: %v, want ErrInvalidConfig", err)
	}
}
