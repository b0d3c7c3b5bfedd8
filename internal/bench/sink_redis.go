package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// redisCeiling publishes as publishers/redisstream does: one pipeline of
// XADDs per batch with the same fields, each XADD's reply awaited. A topic
// is a stream key (no prefix).
type redisCeiling struct{ client *redis.Client }

func openRedisCeiling(ctx context.Context, url string) (ceiling, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis: %s: %w", redactURL(url), err)
	}
	opts.ClientName = "relay-bench"
	c := redis.NewClient(opts)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis: cannot reach %s (start redis-server, or pass --sink-url): %w", redactURL(url), err)
	}
	return &redisCeiling{client: c}, nil
}

func (r *redisCeiling) publish(ctx context.Context, topic string, msgs []outbox.Message) error {
	pipe := r.client.Pipeline()
	cmds := make([]*redis.StringCmd, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: []any{
			redisstream.FieldEventID, m.ID.String(),
			redisstream.FieldKey, m.Key,
			redisstream.FieldPayload, m.Payload,
			redisstream.FieldHeaders, "{}",
			redisstream.FieldCreatedAt, m.CreatedAt.UTC().Format(time.RFC3339Nano),
		}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redis: pipeline of %d XADDs: %w", len(msgs), err)
	}
	for _, c := range cmds {
		if c.Val() == "" {
			return fmt.Errorf("redis: XADD without an entry id: %v", c.Err())
		}
	}
	return nil
}

func (r *redisCeiling) close() error { return r.client.Close() }
