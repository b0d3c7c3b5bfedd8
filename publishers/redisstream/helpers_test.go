package redisstream_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// envAddr names the variable that points the tests at another Redis than
// the one on this machine's default port.
const envAddr = "OUTBOX_TEST_REDIS_ADDR"

// sharedRedis returns the address of the Redis the tests share (streams
// of their own, deleted when they end), failing t with how to start one
// when it does not answer. The tests never stop or reconfigure it: those
// that need to are given a private server (startPrivate).
func sharedRedis(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(envAddr)
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 2 * time.Second})
	defer c.Close()
	if err := c.Ping(testCtx(t, 5*time.Second)).Err(); err != nil {
		t.Fatalf("no Redis answers at %s (%v): start one with `redis-server --port 6379 --save '' --appendonly no`, or set %s to the host:port of one", addr, err, envAddr)
	}
	return addr
}

// newClient returns a go-redis client of its own for addr, closed when t
// ends: the tests read what arrived with it, never through the sink.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newPublisher returns a publisher closed when t ends.
func newPublisher(t testing.TB, cfg redisstream.Config) *redisstream.Publisher {
	t.Helper()
	p, err := redisstream.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// testCtx returns a context that ends with the test or after d.
func testCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var (
	runID     = randomHex(4)
	streamSeq atomic.Int64
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freshStream returns a topic no other test uses, whose stream (on c's
// server, under prefix) is deleted when t ends.
func freshStream(t testing.TB, c *redis.Client, prefix string) string {
	t.Helper()
	topic := fmt.Sprintf("outboxrelay-test-%s-%d", runID, streamSeq.Add(1))
	t.Cleanup(func() {
		if err := c.Del(context.Background(), prefix+topic).Err(); err != nil {
			t.Errorf("delete stream %s: %v", prefix+topic, err)
		}
	})
	return topic
}

// newMsg returns a message with a fresh id; key "" means a nil key.
func newMsg(topic, key, payload string) outbox.Message {
	m := outbox.Message{ID: uuid.New(), Topic: topic, Payload: []byte(payload), Attempt: 1, CreatedAt: time.Now()}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}

// entry is a stream entry as Redis returns it, fields in their order.
type entry struct {
	ID     string
	Fields []string
	Values map[string]string
}

// readStream returns every entry of stream, oldest first, with its fields
// in the order they were written.
func readStream(t testing.TB, c *redis.Client, stream string) []entry {
	t.Helper()
	raw, err := c.Do(testCtx(t, 10*time.Second), "XRANGE", stream, "-", "+").Slice()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", stream, err)
	}
	out := make([]entry, len(raw))
	for i, r := range raw {
		pair, ok := r.([]any)
		if !ok || len(pair) != 2 {
			t.Fatalf("XRANGE %s: entry %d is %#v", stream, i, r)
		}
		fields, ok := pair[1].([]any)
		if !ok || len(fields)%2 != 0 {
			t.Fatalf("XRANGE %s: fields of entry %d are %#v", stream, i, pair[1])
		}
		e := entry{ID: pair[0].(string), Values: map[string]string{}}
		for k := 0; k < len(fields); k += 2 {
			name, value := fields[k].(string), fields[k+1].(string)
			if _, dup := e.Values[name]; dup {
				t.Errorf("entry %s of %s has field %q twice", e.ID, stream, name)
			}
			e.Fields = append(e.Fields, name)
			e.Values[name] = value
		}
		out[i] = e
	}
	return out
}

// records converts the entries of topic's stream for the conformance
// suite, checking that each has the fields the sink documents.
func records(t testing.TB, topic, stream string, entries []entry) []publisherstest.Record {
	t.Helper()
	out := make([]publisherstest.Record, len(entries))
	for i, e := range entries {
		for _, name := range e.Fields {
			switch name {
			case redisstream.FieldEventID, redisstream.FieldKey, redisstream.FieldPayload, redisstream.FieldHeaders, redisstream.FieldCreatedAt:
			default:
				t.Errorf("entry %s of %s has an undocumented field %q", e.ID, stream, name)
			}
		}
		r := publisherstest.Record{Topic: topic, Stream: stream, Value: []byte(e.Values[redisstream.FieldPayload]), EventID: e.Values[redisstream.FieldEventID]}
		if k, ok := e.Values[redisstream.FieldKey]; ok {
			r.Key = []byte(k)
		}
		if err := json.Unmarshal([]byte(e.Values[redisstream.FieldHeaders]), &r.Headers); err != nil {
			t.Errorf("entry %s of %s: headers %q are not a JSON object of strings: %v", e.ID, stream, e.Values[redisstream.FieldHeaders], err)
		}
		if r.Headers == nil {
			r.Headers = map[string]string{}
		}
		out[i] = r
	}
	return out
}

// perMessage expands a Publish result, requiring a publishers.Errors of
// the right length when the outcome differs per message.
func perMessage(t testing.TB, err error, n int) []error {
	t.Helper()
	var each publishers.Errors
	if errors.As(err, &each) && len(each) != n {
		t.Fatalf("publishers.Errors of length %d for %d messages", len(each), n)
	}
	return publishers.PerMessage(err, n)
}

// freePort returns a loopback port nothing listens on.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// privateRedis is a redis-server this test started on a port of its own,
// which it may stop, reconfigure or fill at will.
type privateRedis struct {
	Addr   string
	Client *redis.Client

	port   int
	args   []string
	exited chan struct{} // closed when the current process has exited
}

// startPrivate starts redis-server on a free loopback port, without
// persistence, with the extra arguments (such as "--requirepass", "x";
// "{port}" in one stands for the port), and stops it when t ends. It returns once the server logged that it
// accepts connections.
func startPrivate(t testing.TB, args ...string) *privateRedis {
	t.Helper()
	r := &privateRedis{args: args}
	r.startOnAFreePort(t)
	r.Client = newClient(t, r.Addr)
	return r
}

// startPrivateTLS is startPrivate for a server that speaks TLS only, with
// the certificates of pki; it requires client certificates when
// authClients is set. Its Client field is nil.
func startPrivateTLS(t testing.TB, pki testPKI, authClients bool) *privateRedis {
	t.Helper()
	auth := "no"
	if authClients {
		auth = "yes"
	}
	r := &privateRedis{args: []string{
		"--port", "0", "--tls-port", "{port}",
		"--tls-cert-file", pki.serverCert, "--tls-key-file", pki.serverKey,
		"--tls-ca-cert-file", pki.caCert, "--tls-auth-clients", auth,
	}}
	r.startOnAFreePort(t)
	return r
}

// startOnAFreePort starts the server on a port nothing listened on, and
// on another if something took that one before the server bound it (a
// client's connection elsewhere on a busy machine may).
func (r *privateRedis) startOnAFreePort(t testing.TB) {
	t.Helper()
	for range 5 {
		r.port = freePort(t)
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
		if !r.start(t) {
			return
		}
	}
	t.Fatal("redis-server found its port taken five times")
}

// start starts the server process on r's port. It returns true, having
// started nothing, when the port was taken; any other failure fails t.
func (r *privateRedis) start(t testing.TB) (portTaken bool) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH (%v): install Redis (apt-get install redis-server) to run these tests", err)
	}
	all := []string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}
	for _, a := range r.args {
		all = append(all, strings.ReplaceAll(a, "{port}", strconv.Itoa(r.port)))
	}
	cmd := exec.Command(bin, all...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	ready, exited := make(chan struct{}), make(chan struct{})
	r.exited = exited
	var tail strings.Builder
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		once := false
		for sc.Scan() {
			line := sc.Text()
			if tail.Len() < 16<<10 {
				tail.WriteString(line + "\n")
			}
			if !once && strings.Contains(line, "Ready to accept connections") {
				once = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // the process this test started, by its pid
		<-exited
	})
	select {
	case <-ready:
	case <-exited:
		if strings.Contains(tail.String(), "Address already in use") {
			return true
		}
		t.Fatalf("redis-server %v exited before it was ready:\n%s", all, tail.String())
	case <-time.After(time.Minute):
		t.Fatalf("redis-server %v not ready after a minute", all) // the log is still being written: not shown
	}
	return false
}

// Restart stops the server (SHUTDOWN NOSAVE, which closes every client
// connection as a crash would) and starts it again on the same port,
// empty.
func (r *privateRedis) Restart(t testing.TB) {
	t.Helper()
	_ = r.Client.ShutdownNoSave(testCtx(t, 10*time.Second)).Err() // the connection closes: no reply
	select {
	case <-r.exited:
	case <-time.After(time.Minute):
		t.Fatal("redis-server still running a minute after SHUTDOWN")
	}
	if r.start(t) {
		t.Fatalf("redis-server could not restart: port %d was taken meanwhile", r.port)
	}
}
