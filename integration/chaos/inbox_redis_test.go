package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/inbox"
	inboxredis "github.com/outboxrelay/outboxrelay/inbox/redisstream"
)

// redisSource consumes each topic's stream in the consumer group
// consumerName, as a group member named anew for each instance, on a
// client of the instance's own (to the server directly: the broker faults
// act on the relays). An entry is acknowledged (XACK) once handled; a
// crash leaves the entry, and the rest of what the instance read, pending
// under a member that is gone, and every instance first claims the
// entries pending longer than redisClaimIdle (XAUTOCLAIM).
type redisSource struct {
	opts    *redis.Options
	streams []string
}

func newRedisSource(s *sink, topics []string) consumerSource {
	opts, err := redis.ParseURL(s.flags.Lookup("redis-url").Value.String())
	if err != nil {
		panic(err) // the reader parsed it already
	}
	if pw := s.flags.Lookup("redis-password").Value.String(); pw != "" {
		opts.Password = pw
	}
	prefix := s.flags.Lookup("redis-stream-prefix").Value.String()
	r := redisSource{opts: opts}
	for _, topic := range topics {
		r.streams = append(r.streams, prefix+topic)
	}
	return r
}

const (
	// redisClaimIdle is how long an entry stays pending before another
	// instance claims it.
	redisClaimIdle = 2 * time.Second
	// redisRead bounds the entries one read hands over.
	redisRead = 100
)

func (r redisSource) instance(ctx context.Context, handle func(context.Context, inbox.Message) bool) error {
	rdb := redis.NewClient(r.opts)
	defer rdb.Close()
	member := uuid.NewString()
	for _, stream := range r.streams {
		err := rdb.XGroupCreateMkStream(ctx, stream, consumerName, "0").Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("redis consumer: group on %s: %w", stream, err)
		}
	}
	// each hands stream's entries over and acknowledges them; false when
	// handle stopped it.
	each := func(stream string, entries []redis.XMessage) (bool, error) {
		for _, e := range entries {
			m, _ := inboxredis.Message(stream, e) // not readable: a zero id, which Handle refuses
			if !handle(ctx, m) {
				return false, nil
			}
			if err := rdb.XAck(ctx, stream, consumerName, e.ID).Err(); err != nil {
				return false, fmt.Errorf("redis consumer: ack: %w", err)
			}
		}
		return true, nil
	}
	for {
		for _, stream := range r.streams {
			claimed, _, err := rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: stream, Group: consumerName, Consumer: member,
				MinIdle: redisClaimIdle, Start: "0-0", Count: redisRead}).Result()
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return fmt.Errorf("redis consumer: claim: %w", err)
			}
			if ok, err := each(stream, claimed); !ok {
				return err
			}
			res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: consumerName, Consumer: member,
				Streams: []string{stream, ">"}, Count: redisRead, Block: 250 * time.Millisecond}).Result()
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, redis.Nil):
				continue
			case err != nil:
				return fmt.Errorf("redis consumer: read: %w", err)
			}
			for _, s := range res {
				if ok, err := each(stream, s.Messages); !ok {
					return err
				}
			}
		}
	}
}
