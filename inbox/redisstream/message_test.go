package redisstream_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/inbox/internal/adaptertest"
	"github.com/outboxrelay/outboxrelay/inbox/redisstream"
	redissink "github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// redisAddr is the Redis the tests use: OUTBOX_TEST_REDIS_ADDR, or the one
// on this machine's default port.
func redisAddr() string {
	if a := os.Getenv("OUTBOX_TEST_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

func TestMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer c.Close()
	stream := "outboxrelay-test-inbox-" + uuid.NewString()[:13]
	defer c.Del(context.Background(), stream)

	p, err := redissink.New(redissink.Config{URL: "redis://" + redisAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sent := adaptertest.Events(stream) // no StreamPrefix: the topic is the stream
	adaptertest.Publish(t, p, sent)

	streams, err := c.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, "0"}, Block: -1}).Result()
	if err != nil {
		t.Fatalf("XREAD: %v", err)
	}
	var got []inbox.Message
	for _, s := range streams {
		for _, e := range s.Messages {
			m, err := redisstream.Message(s.Stream, e)
			if err != nil {
				t.Fatalf("Message: %v", err)
			}
			got = append(got, m)
		}
	}
	adaptertest.Check(t, got, sent, stream, time.Nanosecond)
}

func TestMessageWithoutEventID(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"no field":   {redissink.FieldPayload: "x", redissink.FieldHeaders: "{}"},
		"empty":      {redissink.FieldEventID: ""},
		"not a UUID": {redissink.FieldEventID: "order-1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := redisstream.Message("orders", redis.XMessage{ID: "1-0", Values: values})
			if !errors.Is(err, inbox.ErrNoEventID) {
				t.Errorf("error %v, want one wrapping inbox.ErrNoEventID", err)
			}
		})
	}
}
