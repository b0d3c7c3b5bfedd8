package redisstream_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// Publish appends to the stream StreamPrefix + topic; a topic that makes
// no valid stream key fails permanently, alone. (It runs against the Redis
// on this machine's default port.)
func ExamplePublisher_Publish() {
	prefix := "outboxrelay-example-" + uuid.NewString() + ":"
	p, err := redisstream.New(redisstream.Config{URL: "redis://127.0.0.1:6379/0", StreamPrefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs := []outbox.Message{
		{ID: uuid.New(), Topic: "orders", Key: []byte("customer-42"), Payload: []byte(`{"order":1}`)},
		{ID: uuid.New(), Topic: "not a stream key", Key: []byte("customer-42"), Payload: []byte(`{"order":2}`)},
	}
	for i, err := range publishers.PerMessage(p.Publish(ctx, msgs), len(msgs)) {
		switch {
		case err == nil:
			fmt.Printf("message %d: published\n", i)
		case publishers.IsPermanent(err):
			fmt.Printf("message %d: permanent failure\n", i)
		default:
			fmt.Printf("message %d: retry later\n", i)
		}
	}

	// What a consumer reads: the entry's fields.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	defer rdb.Del(ctx, prefix+"orders")
	entries, err := rdb.XRange(ctx, prefix+"orders", "-", "+").Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(entries[0].Values["key"], entries[0].Values["payload"], entries[0].Values["headers"])
	// Output:
	// message 0: published
	// message 1: permanent failure
	// customer-42 {"order":1} {}
}
