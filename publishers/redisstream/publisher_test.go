package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// Each message becomes one entry of the stream StreamPrefix + Topic, with
// the documented fields in the documented order: the key only when the
// message has one (an empty key stays an empty value), the headers as a
// JSON object, the creation time in UTC.
func TestEntryFields(t *testing.T) {
	t.Parallel()
	addr := sharedRedis(t)
	c := newClient(t, addr)
	const prefix = "outboxrelay-test:"
	topic := freshStream(t, c, prefix)
	p := newPublisher(t, redisstream.Config{URL: "redis://" + addr, StreamPrefix: prefix})

	created := time.Date(2026, 3, 4, 5, 6, 7, 890123456, time.FixedZone("CET", 3600))
	msgs := []outbox.Message{
		{ID: uuid.New(), Topic: topic, Key: []byte("order-1"), Payload: []byte(`{"a":1}`), CreatedAt: created,
			Headers: map[string]string{"trace": "<&>", "ünï": "cødé", outbox.HeaderEventID: "forged"}},
		{ID: uuid.New(), Topic: topic, Payload: []byte("no key, no headers, no time")},
		{ID: uuid.New(), Topic: topic, Key: []byte{}, Payload: nil},
	}
	if err := p.Publish(testCtx(t, publisherstestTimeout), msgs); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if n, err := c.Exists(testCtx(t, publisherstestTimeout), topic).Result(); err != nil || n != 0 {
		t.Errorf("a key named after the topic alone exists (%d, %v): the prefix was not applied", n, err)
	}
	got := readStream(t, c, prefix+topic)
	if len(got) != len(msgs) {
		t.Fatalf("%d entries for %d messages", len(got), len(msgs))
	}
	want := []struct {
		fields []string
		values map[string]string
	}{
		{[]string{"event_id", "key", "payload", "headers", "created_at"}, map[string]string{
			"event_id": msgs[0].ID.String(), "key": "order-1", "payload": `{"a":1}`,
			"headers": `{"trace":"<&>","ünï":"cødé"}`, "created_at": "2026-03-04T04:06:07.890123456Z",
		}},
		{[]string{"event_id", "payload", "headers"}, map[string]string{
			"event_id": msgs[1].ID.String(), "payload": "no key, no headers, no time", "headers": "{}",
		}},
		{[]string{"event_id", "key", "payload", "headers"}, map[string]string{
			"event_id": msgs[2].ID.String(), "key": "", "payload": "", "headers": "{}",
		}},
	}
	for i, w := range want {
		if !slices.Equal(got[i].Fields, w.fields) {
			t.Errorf("entry %d has the fields %q, want %q", i, got[i].Fields, w.fields)
		}
		for name, v := range w.values {
			if got[i].Values[name] != v {
				t.Errorf("entry %d: field %s is %q, want %q", i, name, got[i].Values[name], v)
			}
		}
	}
}

// A topic that makes no valid stream key fails permanently, alone, with a
// message naming the problem; the rest of the batch arrives.
func TestInvalidStreamIsPermanent(t *testing.T) {
	t.Parallel()
	addr := sharedRedis(t)
	c := newClient(t, addr)
	good := freshStream(t, c, "")
	p := newPublisher(t, redisstream.Config{URL: "redis://" + addr})
	bad := map[string]string{
		"":            "empty topic",
		"has space":   "white space",
		"line\nbreak": "control character",
		"bad\xffutf8": "not valid UTF-8",
		strings.Repeat("x", redisstream.MaxStreamKeyLen+1): "longer than",
	}
	var msgs []outbox.Message
	for topic := range bad {
		msgs = append(msgs, newMsg(good, "k", "fits"), newMsg(topic, "k", "refused"))
	}
	errs := perMessage(t, p.Publish(testCtx(t, publisherstestTimeout), msgs), len(msgs))
	for i, err := range errs {
		if i%2 == 0 {
			if err != nil {
				t.Errorf("message %d to a valid stream: %v", i, err)
			}
			continue
		}
		topic := msgs[i].Topic
		if publishers.ClassOf(err).String() != "permanent" || !errors.Is(err, redisstream.ErrInvalidStream) || !strings.Contains(err.Error(), bad[topic]) {
			t.Errorf("topic %q: %s (%v), want permanent, wrapping ErrInvalidStream and saying %q", topic, publishers.ClassOf(err).String(), err, bad[topic])
		}
	}
	if n := len(readStream(t, c, good)); n != len(bad) {
		t.Errorf("%d entries arrived in the valid stream, want %d", n, len(bad))
	}
}

// A key that holds something other than a stream makes Redis answer
// WRONGTYPE: permanent for the messages of that topic only, each error
// naming the stream and the event.
func TestWrongTypeIsPermanentPerMessage(t *testing.T) {
	t.Parallel()
	addr := sharedRedis(t)
	c := newClient(t, addr)
	good, bad := freshStream(t, c, ""), freshStream(t, c, "")
	if err := c.LPush(testCtx(t, publisherstestTimeout), bad, "a list").Err(); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(t, redisstream.Config{URL: "redis://" + addr})
	msgs := []outbox.Message{newMsg(good, "k", "1"), newMsg(bad, "k", "2"), newMsg(good, "k", "3")}
	errs := perMessage(t, p.Publish(testCtx(t, publisherstestTimeout), msgs), len(msgs))
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("messages to the stream: %v, %v; want both acknowledged", errs[0], errs[2])
	}
	if publishers.ClassOf(errs[1]).String() != "permanent" || !strings.Contains(errs[1].Error(), "WRONGTYPE") ||
		!strings.Contains(errs[1].Error(), bad) || !strings.Contains(errs[1].Error(), msgs[1].ID.String()) {
		t.Errorf("message to the list: %s (%v), want permanent, naming WRONGTYPE, the stream and the event", publishers.ClassOf(errs[1]).String(), errs[1])
	}
	if n := len(readStream(t, c, good)); n != 2 {
		t.Errorf("%d entries arrived, want 2", n)
	}
}

// With MaxLen, each XADD trims its stream to about MaxLen entries; without,
// nothing is trimmed.
func TestMaxLenTrims(t *testing.T) {
	t.Parallel()
	addr := sharedRedis(t)
	c := newClient(t, addr)
	const n, maxLen = 1000, 10
	for _, limit := range []int64{0, maxLen} {
		topic := freshStream(t, c, "")
		p := newPublisher(t, redisstream.Config{URL: "redis://" + addr, MaxLen: limit})
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = newMsg(topic, "k", fmt.Sprint(i))
		}
		if err := p.Publish(testCtx(t, publisherstestTimeout), msgs); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		got, err := c.XLen(testCtx(t, publisherstestTimeout), topic).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case limit == 0 && got != n:
			t.Errorf("without MaxLen the stream holds %d entries, want %d", got, n)
		case limit > 0 && (got < limit || got >= n):
			// "~": whole macro nodes (stream-node-max-entries, 100 by
			// default) are dropped, so a few more than MaxLen may stay.
			t.Errorf("with MaxLen %d the stream holds %d entries of %d, want at least %d and fewer than %d", limit, got, n, limit, n)
		}
		if limit > 0 {
			last := readStream(t, c, topic)
			if tail := last[len(last)-1].Values[redisstream.FieldPayload]; tail != fmt.Sprint(n-1) {
				t.Errorf("the newest entry left is %q, want %q: trimming must drop the oldest", tail, fmt.Sprint(n-1))
			}
		}
	}
}

// WAIT on a server without replicas: asking for one replica fails every
// message of the call, transiently, with ErrNotReplicated, once
// WaitTimeout has passed; the entries were appended all the same (a retry
// appends them again: consumers deduplicate by event id). Asking for none
// (the default) succeeds.
func TestWaitForReplicas(t *testing.T) {
	t.Parallel()
	addr := sharedRedis(t)
	c := newClient(t, addr)
	topic := freshStream(t, c, "")
	msgs := []outbox.Message{newMsg(topic, "a", "1"), newMsg(topic, "b", "2"), newMsg(topic, "", "3")}

	const waitTimeout = 100 * time.Millisecond
	p := newPublisher(t, redisstream.Config{URL: "redis://" + addr, WaitReplicas: 1, WaitTimeout: waitTimeout})
	start := time.Now()
	err := p.Publish(testCtx(t, publisherstestTimeout), msgs)
	took := time.Since(start)
	for i, e := range perMessage(t, err, len(msgs)) {
		if publishers.ClassOf(e).String() != "transient" || !errors.Is(e, redisstream.ErrNotReplicated) {
			t.Errorf("message %d with WAIT 1 on a server without replicas: %s (%v), want transient wrapping ErrNotReplicated", i, publishers.ClassOf(e).String(), e)
		}
	}
	if took < waitTimeout {
		t.Errorf("Publish with WAIT returned after %v, before WaitTimeout (%v)", took, waitTimeout)
	}
	if n := len(readStream(t, c, topic)); n != len(msgs) {
		t.Errorf("%d entries appended before the WAIT that failed, want %d", n, len(msgs))
	}

	p0 := newPublisher(t, redisstream.Config{URL: "redis://" + addr, WaitReplicas: 0, WaitTimeout: waitTimeout})
	if err := p0.Publish(testCtx(t, publisherstestTimeout), msgs); err != nil {
		t.Errorf("Publish without WAIT: %v", err)
	}
}

// WAIT with a replica attached succeeds once the replica has the entries;
// writing to the replica itself is READONLY: the sink is unavailable.
func TestWaitWithReplicaAndReadOnlyReplica(t *testing.T) {
	t.Parallel()
	sharedRedis(t) // the same requirement as the other tests: a Redis installed
	master := startPrivate(t, "--repl-diskless-sync-delay", "0")
	host, port, _ := strings.Cut(master.Addr, ":")
	replica := startPrivate(t, "--replicaof", host, port)
	awaitReplication(t, master, replica)

	p := newPublisher(t, redisstream.Config{URL: "redis://" + master.Addr, WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	msgs := []outbox.Message{newMsg("replicated", "k", "1"), newMsg("replicated", "k", "2")}
	if err := p.Publish(testCtx(t, publisherstestTimeout), msgs); err != nil {
		t.Fatalf("Publish with WAIT 1 and a replica: %v", err)
	}
	if n, err := replica.Client.XLen(testCtx(t, publisherstestTimeout), "replicated").Result(); err != nil || n != 2 {
		t.Errorf("the replica holds %d entries (%v) once WAIT returned, want 2", n, err)
	}

	onReplica := newPublisher(t, redisstream.Config{URL: "redis://" + replica.Addr})
	err := onReplica.Publish(testCtx(t, publisherstestTimeout), msgs)
	for i, e := range perMessage(t, err, len(msgs)) {
		if publishers.ClassOf(e).String() != "unavailable" || !strings.Contains(e.Error(), "READONLY") {
			t.Errorf("message %d to a read-only replica: %s (%v), want unavailable naming READONLY", i, publishers.ClassOf(e).String(), e)
		}
	}
	if err := onReplica.Probe(testCtx(t, publisherstestTimeout)); err != nil {
		t.Errorf("Probe of a replica (it answers PING): %v", err)
	}
}

// awaitReplication waits until replica is in sync with master.
func awaitReplication(t *testing.T, master, replica *privateRedis) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		mi, _ := master.Client.Info(testCtx(t, publisherstestTimeout), "replication").Result()
		ri, _ := replica.Client.Info(testCtx(t, publisherstestTimeout), "replication").Result()
		if strings.Contains(mi, "connected_slaves:1") && strings.Contains(ri, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica not in sync after 20s:\nmaster:\n%s\nreplica:\n%s", mi, ri)
		}
		time.Sleep(20 * time.Millisecond) // polling INFO: Redis offers nothing to wait on
	}
}

// A server out of memory (maxmemory reached, nothing evictable) refuses
// every write with OOM: unavailable, not the messages' fault. PING still
// answers.
func TestOutOfMemoryIsUnavailable(t *testing.T) {
	t.Parallel()
	sharedRedis(t)
	r := startPrivate(t, "--maxmemory-policy", "noeviction")
	p := newPublisher(t, redisstream.Config{URL: "redis://" + r.Addr})
	if err := p.Publish(testCtx(t, publisherstestTimeout), []outbox.Message{newMsg("oom", "k", "before")}); err != nil {
		t.Fatalf("Publish before the limit: %v", err)
	}
	if err := r.Client.ConfigSet(testCtx(t, publisherstestTimeout), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	msgs := []outbox.Message{newMsg("oom", "k", "1"), newMsg("oom", "", "2")}
	for i, e := range perMessage(t, p.Publish(testCtx(t, publisherstestTimeout), msgs), len(msgs)) {
		if publishers.ClassOf(e).String() != "unavailable" || !strings.Contains(e.Error(), "OOM") {
			t.Errorf("message %d out of memory: %s (%v), want unavailable naming OOM", i, publishers.ClassOf(e).String(), e)
		}
	}
	if err := r.Client.ConfigSet(testCtx(t, publisherstestTimeout), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(testCtx(t, publisherstestTimeout), msgs); err != nil {
		t.Errorf("Publish once memory is available again: %v", err)
	}
}

// A script running past busy-reply-threshold makes Redis answer BUSY to
// everything, PING included: Publish and Probe are unavailable until the
// script is killed.
func TestBusyScriptIsUnavailable(t *testing.T) {
	t.Parallel()
	sharedRedis(t)
	r := startPrivate(t, "--busy-reply-threshold", "50")
	p := newPublisher(t, redisstream.Config{URL: "redis://" + r.Addr})
	if err := p.Publish(testCtx(t, publisherstestTimeout), []outbox.Message{newMsg("busy", "k", "before")}); err != nil {
		t.Fatalf("Publish before the script: %v", err)
	}
	script := newClient(t, r.Addr)
	var wg sync.WaitGroup
	wg.Go(func() { _ = script.Eval(context.Background(), "while true do end", nil).Err() }) // ends when killed
	defer wg.Wait()
	killer := newClient(t, r.Addr)
	defer func() {
		if err := killer.ScriptKill(testCtx(t, publisherstestTimeout)).Err(); err != nil {
			t.Errorf("SCRIPT KILL: %v", err)
		}
	}()
	// Redis answers BUSY once the script has run for the threshold.
	deadline := time.Now().Add(10 * time.Second)
	for killer.Ping(testCtx(t, publisherstestTimeout)).Err() == nil {
		if time.Now().After(deadline) {
			t.Fatal("PING still answered 10s after the script started")
		}
		time.Sleep(10 * time.Millisecond) // polling: Redis offers nothing to wait on
	}
	msgs := []outbox.Message{newMsg("busy", "k", "1")}
	for i, e := range perMessage(t, p.Publish(testCtx(t, publisherstestTimeout), msgs), len(msgs)) {
		if publishers.ClassOf(e).String() != "unavailable" || !strings.Contains(e.Error(), "BUSY") {
			t.Errorf("message %d while a script runs: %s (%v), want unavailable naming BUSY", i, publishers.ClassOf(e).String(), e)
		}
	}
	if err := p.Probe(testCtx(t, publisherstestTimeout)); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Probe while a script runs: %s (%v), want unavailable", publishers.ClassOf(err).String(), err)
	}
}

// A server that requires a password: without it, or with a wrong one, the
// sink is unavailable (NOAUTH, WRONGPASS), and no error holds the
// password; Config.Password, or the URL's, gets through.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	sharedRedis(t)
	const secret = "s3cr3t-hunter2"
	r := startPrivate(t, "--requirepass", secret)
	msgs := []outbox.Message{newMsg("auth", "k", "1")}
	for _, c := range []struct {
		name string
		cfg  redisstream.Config
		want string
	}{
		{"no password", redisstream.Config{URL: "redis://" + r.Addr}, "unavailable"},
		{"wrong password", redisstream.Config{URL: "redis://:wrong-" + secret + "@" + r.Addr}, "unavailable"},
		{"wrong Password field", redisstream.Config{URL: "redis://" + r.Addr, Password: "not-" + secret}, "unavailable"},
		{"password in the URL", redisstream.Config{URL: "redis://:" + secret + "@" + r.Addr}, "acknowledged"},
		{"Password field over the URL's", redisstream.Config{URL: "redis://:wrong@" + r.Addr, Password: secret}, "acknowledged"},
	} {
		p := newPublisher(t, c.cfg)
		err := p.Publish(testCtx(t, publisherstestTimeout), msgs)
		if publishers.ClassOf(err).String() != c.want {
			t.Errorf("%s: Publish = %s (%v), want %s", c.name, publishers.ClassOf(err).String(), err, c.want)
		}
		perr := p.Probe(testCtx(t, publisherstestTimeout))
		if (perr == nil) != (c.want == "acknowledged") {
			t.Errorf("%s: Probe = %v", c.name, perr)
		}
		for _, s := range []string{fmt.Sprint(err), fmt.Sprint(perr), p.String(), fmt.Sprint(p.Config()), fmt.Sprintf("%#v", p.Config())} {
			if strings.Contains(s, secret) {
				t.Errorf("%s: the password leaks: %s", c.name, s)
			}
		}
	}
}

// Nothing listening: every message is unavailable, at once, and so is
// Probe.
func TestConnectionRefusedIsUnavailable(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, redisstream.Config{URL: fmt.Sprintf("redis://127.0.0.1:%d", freePort(t))})
	msgs := []outbox.Message{newMsg("refused", "a", "1"), newMsg("refused", "", "2")}
	start := time.Now()
	err := p.Publish(testCtx(t, time.Minute), msgs)
	for i, e := range perMessage(t, err, len(msgs)) {
		if publishers.ClassOf(e).String() != "unavailable" {
			t.Errorf("message %d: %s (%v), want unavailable", i, publishers.ClassOf(e).String(), e)
		}
	}
	if took := time.Since(start); took > 20*time.Second { // at once: not the context's minute
		t.Errorf("Publish to a closed port took %v", took)
	}
	if err := p.Probe(testCtx(t, publisherstestTimeout)); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Probe: %s (%v), want unavailable", publishers.ClassOf(err).String(), err)
	}
}

// A Redis that is restarted between two calls: the first Probe and Publish
// after it is back succeed on the same publisher, whose pooled connections
// the restart closed.
func TestRestartedServer(t *testing.T) {
	t.Parallel()
	sharedRedis(t)
	r := startPrivate(t)
	p := newPublisher(t, redisstream.Config{URL: "redis://" + r.Addr, PoolSize: 4})
	var wg sync.WaitGroup
	for i := range 4 { // several pooled connections
		wg.Go(func() {
			if err := p.Publish(testCtx(t, publisherstestTimeout), []outbox.Message{newMsg("restart", "k", fmt.Sprint(i))}); err != nil {
				t.Errorf("Publish before the restart: %v", err)
			}
		})
	}
	wg.Wait()
	r.Restart(t)
	if err := p.Probe(testCtx(t, publisherstestTimeout)); err != nil {
		t.Errorf("first Probe after the restart: %v", err)
	}
	for i := range 4 {
		if err := p.Publish(testCtx(t, publisherstestTimeout), []outbox.Message{newMsg("restart", "k", fmt.Sprint(i))}); err != nil {
			t.Errorf("Publish %d after the restart: %v", i, err)
		}
	}
}

// Close while Publish calls are in flight: they end (unavailable or
// acknowledged), Close returns at once, and later calls are unavailable.
func TestCloseDuringPublish(t *testing.T) {
	t.Parallel()
	addr := sharedRedis(t)
	c := newClient(t, addr)
	topic := freshStream(t, c, "")
	p := newPublisher(t, redisstream.Config{URL: "redis://" + addr})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			msgs := make([]outbox.Message, 2000)
			for i := range msgs {
				msgs[i] = newMsg(topic, "k", "x")
			}
			for i, e := range perMessage(t, p.Publish(testCtx(t, publisherstestTimeout), msgs), len(msgs)) {
				if e != nil && publishers.ClassOf(e).String() != "unavailable" {
					t.Errorf("message %d of a Publish that Close overtook: %s (%v), want acknowledged or unavailable", i, publishers.ClassOf(e).String(), e)
				}
			}
		})
	}
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second { // room for a busy machine
		t.Errorf("Close took %v", took)
	}
	wg.Wait()
	if err := p.Publish(testCtx(t, publisherstestTimeout), []outbox.Message{newMsg(topic, "k", "late")}); publishers.ClassOf(err).String() != "unavailable" || !errors.Is(err, redisstream.ErrClosed) {
		t.Errorf("Publish after Close: %s (%v), want unavailable wrapping ErrClosed", publishers.ClassOf(err).String(), err)
	}
	if err := p.Probe(testCtx(t, publisherstestTimeout)); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Probe after Close: %s (%v), want unavailable", publishers.ClassOf(err).String(), err)
	}
}
