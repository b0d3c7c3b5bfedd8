package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/history"
)

// redisSink is a Redis server (OUTBOX_TEST_REDIS_ADDR, or the one on this
// machine) behind a fault proxy. The run's two topics are two streams of
// their own (the sink's first XADD creates each), deleted after the run,
// read back with XRANGE. A record's position is its place in its stream,
// its time the millisecond part of its entry id: the server's clock when
// it appended the entry.
type redisSink struct {
	addr           string
	ordered, plain string
	proxy          *faultproxy.Proxy
	rdb            *redis.Client
}

func newRedisSink() *redisSink {
	s := &redisSink{addr: envOr("OUTBOX_TEST_REDIS_ADDR", "127.0.0.1:6379")}
	s.ordered, s.plain = runTopics()
	return s
}

func (s *redisSink) topics() (string, string) { return s.ordered, s.plain }
func (s *redisSink) kinds() []string          { return kindsWithoutErrors() }
func (s *redisSink) refuse(*float64)          {}
func (s *redisSink) refused() int64           { return 0 }

func (s *redisSink) where() string {
	return fmt.Sprintf("redis://%s (proxy of %s), streams %s and %s", s.proxy.Addr(), s.addr, s.ordered, s.plain)
}

func (s *redisSink) relayArgs() (args, env []string) {
	return []string{"--sink", "redis", "--redis-url", "redis://" + s.proxy.Addr() + "/0",
		"--redis-timeout", publishTimeout.String(), "--redis-dial-timeout", "2s"}, nil
}

func (s *redisSink) start(ctx context.Context, t *testing.T) *faultproxy.Proxy {
	s.rdb = redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = s.rdb.Close() })
	if err := s.rdb.Del(ctx, s.ordered, s.plain).Err(); err != nil {
		t.Fatalf("no Redis answers at %s (start redis-server, or set OUTBOX_TEST_REDIS_ADDR): %v", s.addr, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.rdb.Del(ctx, s.ordered, s.plain).Err(); err != nil {
			t.Errorf("redis: delete streams %s and %s: %v", s.ordered, s.plain, err)
		}
	})
	var err error
	if s.proxy, err = faultproxy.Start(s.addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.proxy.Close() })
	return s.proxy
}

// read reads both streams from their first entry, a page at a time.
func (s *redisSink) read(ctx context.Context, t *testing.T) []record {
	var out []record
	for _, stream := range []string{s.ordered, s.plain} {
		start, n := "-", int64(0)
		for {
			page, err := s.rdb.XRangeN(ctx, stream, start, "+", 1000).Result()
			if err != nil {
				t.Fatalf("redis: XRANGE %s: %v", stream, err)
			}
			if len(page) == 0 {
				break
			}
			for _, e := range page {
				ms, _, _ := strings.Cut(e.ID, "-")
				at, err := strconv.ParseInt(ms, 10, 64)
				if err != nil {
					t.Fatalf("redis: entry id %q of %s: %v", e.ID, stream, err)
				}
				out = append(out, record{history.Delivery{EventID: field(e.Values, "event_id"), Topic: stream, Key: field(e.Values, "key"),
					Offset: n, Time: time.UnixMilli(at)}, field(e.Values, "payload")})
				n++
			}
			start = "(" + page[len(page)-1].ID
		}
	}
	return out
}

// field is an entry's field as a string, "" when it has none.
func field(values map[string]any, name string) string {
	s, _ := values[name].(string)
	return s
}
