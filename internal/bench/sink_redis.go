package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// redisSink is the Redis Streams sink: each run's topic is a stream key
// (no prefix), read back with XREAD. The ceiling publishes as
// publishers/redisstream does: one pipeline of XADDs per batch with the
// same fields, each XADD's reply awaited.
type redisSink struct {
	url    string
	client *redis.Client
}

// Read settings: XREAD of up to redisReadCount entries, blocking up to
// redisReadBlock for the first.
const (
	redisReadCount = 10000
	redisReadBlock = 250 * time.Millisecond
)

func openRedis(ctx context.Context, url string) (*redisSink, error) {
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
	return &redisSink{url: url, client: c}, nil
}

func (r *redisSink) relayArgs() []string { return []string{"--sink", "redis"} }
func (r *redisSink) relayEnv() []string  { return []string{"OUTBOX_REDIS_URL=" + r.url} }

func (r *redisSink) prepare(ctx context.Context, topic string) error {
	return r.cleanup(ctx, topic) // XADD creates the stream
}

func (r *redisSink) cleanup(ctx context.Context, topic string) error {
	if err := r.client.Del(ctx, topic).Err(); err != nil {
		return fmt.Errorf("redis: delete stream %s: %w", topic, err)
	}
	return nil
}

func (r *redisSink) read(ctx context.Context, topic string, follow bool, a *arrivals, ready func()) error {
	if ready != nil {
		ready() // XREAD from the start of the stream misses nothing
	}
	last := "0-0"
	block := time.Duration(-1) // no BLOCK: stop at the end
	if follow {
		block = redisReadBlock
	}
	for {
		res, err := r.client.XRead(ctx, &redis.XReadArgs{Streams: []string{topic, last}, Count: redisReadCount, Block: block}).Result()
		at := time.Now()
		if ctx.Err() != nil {
			if follow {
				return nil
			}
			return ctx.Err()
		}
		if errors.Is(err, redis.Nil) {
			if follow {
				continue
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("redis: read %s after %s: %w", topic, last, err)
		}
		for _, s := range res {
			ids := make([]uuid.UUID, len(s.Messages))
			for i, m := range s.Messages {
				if v, ok := m.Values[redisstream.FieldEventID].(string); ok {
					ids[i], _ = uuid.Parse(v)
				}
				last = m.ID
			}
			a.add(ids, at)
		}
	}
}

func (r *redisSink) publish(ctx context.Context, topic string, msgs []outbox.Message) error {
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

func (r *redisSink) settings(s *Settings) { s.Sink, s.SinkURL = SinkRedis, redactURL(r.url) }

func (r *redisSink) close() error { return r.client.Close() }

var _ ceilingSink = (*redisSink)(nil)
