package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// redisTestAddr returns the Redis the tests use (OUTBOX_TEST_REDIS_ADDR,
// or this machine's default port), failing t with how to start one when
// it does not answer.
func redisTestAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("OUTBOX_TEST_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("no Redis answers at %s (%v): start one with `redis-server --port 6379 --save '' --appendonly no`, or set OUTBOX_TEST_REDIS_ADDR", addr, err)
	}
	return addr
}

// relay run --sink redis publishes every committed event, and none rolled
// back, to the stream prefix+topic, with its id, key, payload and headers
// intact and, for an --ordered-topics topic, each key's events in the
// order they were written; the password is never logged.
func TestRunWithRedisSink(t *testing.T) {
	t.Parallel()
	addr := redisTestAddr(t)
	pool, table := testdb.New(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "outboxrelay-e2e-" + hex.EncodeToString(b) + ":"
	topics := []string{"orders", "payments"}
	t.Cleanup(func() {
		for _, topic := range topics {
			rdb.Del(context.Background(), prefix+topic)
		}
	})

	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	var committed []outbox.Message
	write := func(tx outbox.Executor, m outbox.Message) outbox.Message {
		t.Helper()
		res, err := w.Write(ctx, tx, m)
		if err != nil {
			t.Fatal(err)
		}
		m.ID = res.ID
		return m
	}
	for i := range 30 {
		m := outbox.Message{
			Topic:   topics[i%2],
			Key:     []byte(fmt.Sprintf("customer-%d", i%3)),
			Payload: fmt.Appendf(nil, `{"seq":%d}`, i),
			Headers: map[string]string{"content-type": "application/json", "seq": fmt.Sprint(i)},
		}
		if i%10 == 9 {
			m.Key = nil
		}
		committed = append(committed, write(pool, m))
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rolledBack []outbox.Message
	for i := range 5 {
		rolledBack = append(rolledBack, write(tx, outbox.Message{Topic: "orders", Key: []byte("customer-0"), Payload: fmt.Appendf(nil, "rolled back %d", i)}))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	const secret = "e2e-hunter2" // the test server has no password: AUTH takes any
	env := map[string]string{
		"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema,
		"OUTBOX_REDIS_URL": "redis://" + addr + "/0", "OUTBOX_REDIS_PASSWORD": secret,
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runOut, runErr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "redis", "--redis-stream-prefix", prefix,
			"--ordered-topics", "orders", "--poll-interval", "20ms", "--log-format", "json"},
			func(k string) string { return env[k] }, &runOut, &runErr)
	}()
	testdb.AwaitSent(t, pool, table, len(committed), 30*time.Second)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d; stderr:\n%s", code, runErr.String())
	}
	logs := runErr.String()
	if !strings.Contains(logs, `"msg":"redis sink"`) || !strings.Contains(logs, prefix) {
		t.Errorf("the sink's configuration is not logged:\n%s", logs)
	}
	if strings.Contains(logs, secret) || strings.Contains(runOut.String(), secret) {
		t.Errorf("the Redis password is logged:\n%s", logs)
	}

	// Read back with go-redis, not through the sink.
	type arrived struct {
		stream, key string
		hasKey      bool
		payload     string
		headers     map[string]string
	}
	got := map[string]arrived{}
	order := map[string][]string{} // stream/key -> event ids in stream order
	for _, topic := range topics {
		entries, err := rdb.XRange(ctx, prefix+topic, "-", "+").Result()
		if err != nil {
			t.Fatalf("XRANGE %s: %v", prefix+topic, err)
		}
		for _, e := range entries {
			id, _ := e.Values["event_id"].(string)
			if _, dup := got[id]; dup {
				t.Errorf("event %s arrived twice", id)
			}
			a := arrived{stream: prefix + topic}
			a.key, a.hasKey = e.Values["key"].(string)
			a.payload, _ = e.Values["payload"].(string)
			hj, _ := e.Values["headers"].(string)
			if err := json.Unmarshal([]byte(hj), &a.headers); err != nil {
				t.Errorf("event %s: headers %q: %v", id, hj, err)
			}
			got[id] = a
			if a.hasKey {
				order[topic+"/"+a.key] = append(order[topic+"/"+a.key], id)
			}
		}
	}
	want := map[string][]string{}
	for _, m := range committed {
		id := m.ID.String()
		a, ok := got[id]
		if !ok {
			t.Errorf("committed event %s (%s, key %q) did not arrive", id, m.Topic, m.Key)
			continue
		}
		delete(got, id)
		if a.stream != prefix+m.Topic || a.hasKey != (m.Key != nil) || a.key != string(m.Key) || a.payload != string(m.Payload) {
			t.Errorf("event %s arrived as %+v, written as topic %s, key %q, payload %q", id, a, m.Topic, m.Key, m.Payload)
		}
		if fmt.Sprint(a.headers) != fmt.Sprint(m.Headers) {
			t.Errorf("event %s: headers %v arrived as %v", id, m.Headers, a.headers)
		}
		if m.Key != nil {
			want[m.Topic+"/"+string(m.Key)] = append(want[m.Topic+"/"+string(m.Key)], id)
		}
	}
	for _, m := range rolledBack {
		if _, ok := got[m.ID.String()]; ok {
			t.Errorf("rolled-back event %s arrived", m.ID)
			delete(got, m.ID.String())
		}
	}
	for id := range got {
		t.Errorf("event %s arrived but was never written", id)
	}
	for k, ids := range want {
		if strings.HasPrefix(k, "orders/") && !slices.Equal(order[k], ids) {
			t.Errorf("ordered topic, key %s: arrived in the order %v, written in the order %v", k, order[k], ids)
		}
	}
}

// Every bad --redis-* flag is reported, all at once, each naming the flag
// and its variable; the password never appears.
func TestRedisSinkBadFlags(t *testing.T) {
	t.Parallel()
	db := "postgres://postgres@127.0.0.1:1/postgres"
	code, _, stderr := invoke(context.Background(), map[string]string{"OUTBOX_REDIS_TIMEOUT": "0s"},
		"run", "--sink", "redis", "--database-url", db,
		"--redis-url", "http://u:hunter2@host:6379",
		"--redis-stream-prefix", "events ",
		"--redis-maxlen", "-1",
		"--redis-wait-replicas", "-2",
		"--redis-wait-timeout", "-1s",
		"--redis-max-message-bytes", "0",
		"--redis-pool-size", "-3",
		"--redis-client-name", "two words",
		"--redis-tls-cert", "/nonexistent/cert.pem")
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
	}
	for _, flag := range []string{
		"--redis-url (OUTBOX_REDIS_URL)", "--redis-stream-prefix (OUTBOX_REDIS_STREAM_PREFIX)",
		"--redis-maxlen (OUTBOX_REDIS_MAXLEN)", "--redis-wait-replicas (OUTBOX_REDIS_WAIT_REPLICAS)",
		"--redis-wait-timeout (OUTBOX_REDIS_WAIT_TIMEOUT)", "--redis-max-message-bytes (OUTBOX_REDIS_MAX_MESSAGE_BYTES)",
		"--redis-timeout (OUTBOX_REDIS_TIMEOUT)", "--redis-pool-size (OUTBOX_REDIS_POOL_SIZE)",
		"--redis-client-name (OUTBOX_REDIS_CLIENT_NAME)", "--redis-tls-cert",
	} {
		if !strings.Contains(stderr, flag) {
			t.Errorf("stderr does not name %s:\n%s", flag, stderr)
		}
	}
	if strings.Contains(stderr, "hunter2") {
		t.Errorf("stderr leaks the password:\n%s", stderr)
	}

	// The defaults pass: --sink redis needs no flag of its own.
	f := newFlags("test", "", nil, func(string) string { return "" })
	redis, _ := sinks.Named("redis")
	settings := redis.Flags(f)
	if err := f.parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := settings.Check(relay.Config{}); err != nil {
		t.Errorf("the default --redis-* flags: %v", err)
	}
}
