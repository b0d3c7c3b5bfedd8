package demo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// RedisConfig is how the demo reaches Redis: the Redis sink's URL,
// password and stream prefix.
type RedisConfig struct {
	// URL is redis://[user[:password]@]host[:port][/db]. Defaults to
	// redisstream.DefaultURL.
	URL string
	// Password replaces the URL's. Defaults to the URL's.
	Password string
	// StreamPrefix goes before the topic in the stream key, as the sink
	// puts it. Defaults to "".
	StreamPrefix string
}

// Redis is the demo's Redis: the sink's first XADD creates the stream
// StreamPrefix+topic, read back with XREAD from its first entry; Close
// deletes it.
type Redis struct {
	cfg    RedisConfig
	rdb    *redis.Client
	stream string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewRedis returns the demo's Redis; it connects in Open.
func NewRedis(cfg RedisConfig) *Redis {
	if cfg.URL == "" {
		cfg.URL = redisstream.DefaultURL
	}
	return &Redis{cfg: cfg}
}

// Open deletes the stream StreamPrefix+topic if an earlier run left it and
// reads it from its first entry.
func (r *Redis) Open(ctx context.Context, topic string, got func(Received)) (string, error) {
	opts, err := redis.ParseURL(r.cfg.URL)
	if err != nil {
		return "", fmt.Errorf("redis: %w", err)
	}
	if r.cfg.Password != "" {
		opts.Password = r.cfg.Password
	}
	r.rdb = redis.NewClient(opts)
	r.stream = r.cfg.StreamPrefix + topic
	if err := r.rdb.Del(ctx, r.stream).Err(); err != nil {
		return "", fmt.Errorf("cannot reach Redis at %s (start redis-server, or pass --redis-url): %w", opts.Addr, err)
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		last := "0"
		for ctx.Err() == nil {
			// BLOCK a short while so that Close is not kept waiting: go-redis
			// does not break off a blocked read when ctx ends.
			res, err := r.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{r.stream, last}, Count: 1000, Block: 200 * time.Millisecond}).Result()
			switch {
			case errors.Is(err, redis.Nil): // nothing new within the block
				continue
			case err != nil:
				if ctx.Err() == nil {
					select { // a transient error: try again shortly
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
				continue
			}
			for _, s := range res {
				for _, e := range s.Messages {
					last = e.ID
					got(Received{EventID: field(e.Values, "event_id"), Key: field(e.Values, "key"), Payload: field(e.Values, "payload")})
				}
			}
		}
	}()
	return fmt.Sprintf("redis:    %s, stream %s", opts.Addr, r.stream), nil
}

func field(values map[string]any, name string) string {
	s, _ := values[name].(string)
	return s
}

// Close stops the reader, deletes the stream and disconnects.
func (r *Redis) Close() error {
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	if r.rdb == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.rdb.Del(ctx, r.stream).Err()
	if err != nil {
		err = fmt.Errorf("redis: delete stream %s: %w", r.stream, err)
	}
	return errors.Join(err, r.rdb.Close())
}
