package kafka

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	already := publishers.Permanent(errors.New("already permanent"))
	down := publishers.Unavailable(errors.New("already unavailable"))
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, "acknowledged"},
		// Permanent: the message or its topic.
		{"broker message too large", kafkago.MessageSizeTooLarge, "permanent"},
		{"client message too large", kafkago.MessageTooLargeError{}, "permanent"},
		{"record list too large", kafkago.RecordListTooLarge, "permanent"},
		{"unknown topic", kafkago.UnknownTopicOrPartition, "permanent"},
		{"unknown topic with broker message", fmt.Errorf("%w: %s", kafkago.UnknownTopicOrPartition, "no such topic"), "permanent"},
		{"invalid topic", kafkago.InvalidTopic, "permanent"},
		{"topic authorization failed", kafkago.TopicAuthorizationFailed, "transient"},
		{"invalid record", kafkago.InvalidRecord, "permanent"},
		{"corrupt message", kafkago.InvalidMessage, "permanent"},
		{"invalid timestamp", kafkago.InvalidTimestamp, "permanent"},
		{"already permanent", already, "permanent"},
		// Unavailable: the sink as a whole.
		{"broker not available", kafkago.BrokerNotAvailable, "unavailable"},
		{"network exception", kafkago.NetworkException, "unavailable"},
		{"SASL authentication failed", fmt.Errorf("SASL: %w", kafkago.SASLAuthenticationFailed), "unavailable"},
		{"cluster authorization failed", kafkago.ClusterAuthorizationFailed, "unavailable"},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, "unavailable"},
		{"bare ECONNREFUSED", syscall.ECONNREFUSED, "unavailable"},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), "unavailable"},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), "unavailable"},
		{"EOF", io.EOF, "unavailable"},
		{"unexpected EOF", fmt.Errorf("reading response: %w", io.ErrUnexpectedEOF), "unavailable"},
		{"i/o timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, "unavailable"},
		{"deadline exceeded", context.DeadlineExceeded, "unavailable"},
		{"DNS failure", &net.DNSError{Err: "no such host", Name: "kafka.invalid", IsNotFound: true}, "unavailable"},
		{"unknown certificate authority", x509.UnknownAuthorityError{}, "unavailable"},
		{"already unavailable", down, "unavailable"},
		// Transient: retriable broker errors and the rest.
		{"not enough replicas", kafkago.NotEnoughReplicas, "transient"},
		{"not enough replicas after append", kafkago.NotEnoughReplicasAfterAppend, "transient"},
		{"leader not available", kafkago.LeaderNotAvailable, "transient"},
		{"not leader for partition", fmt.Errorf("%w: %s", kafkago.NotLeaderForPartition, "moved"), "transient"},
		{"request timed out", kafkago.RequestTimedOut, "transient"}, // a kafka.Error with Timeout() true
		{"storage error", kafkago.KafkaStorageError, "transient"},
		{"unknown broker error", kafkago.Unknown, "transient"},
		{"canceled", context.Canceled, "transient"},
		{"closed", ErrClosed, "unavailable"},
		{"anything else", errors.New("boom"), "transient"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := classify(tc.err)
			gotKind := publishers.ClassOf(got).String()
			if gotKind != tc.want {
				t.Errorf("classify(%v) is %s, want %s", tc.err, gotKind, tc.want)
			}
			var tooLarge kafkago.MessageTooLargeError
			if errors.As(tc.err, &tooLarge) { // not comparable: errors.Is cannot match it
				if !errors.As(got, &tooLarge) {
					t.Errorf("classify(%v) = %v, which no longer wraps the cause", tc.err, got)
				}
			} else if tc.err != nil && !errors.Is(got, tc.err) {
				t.Errorf("classify(%v) = %v, which no longer wraps the cause", tc.err, got)
			}
			if publishers.IsPermanent(got) && errors.Is(got, publishers.ErrUnavailable) {
				t.Errorf("classify(%v) is both permanent and unavailable", tc.err)
			}
		})
	}
}

func TestIsRecordLevel(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		kafkago.MessageSizeTooLarge:                       true,
		fmt.Errorf("x: %w", kafkago.InvalidRecord):        true,
		kafkago.UnknownTopicOrPartition:                   false,
		kafkago.NotEnoughReplicas:                         false,
		errors.New("plain"):                               false,
		fmt.Errorf("%w: batch", kafkago.InvalidTimestamp): true,
	} {
		if got := isRecordLevel(err); got != want {
			t.Errorf("isRecordLevel(%v) = %t, want %t", err, got, want)
		}
	}
}

func TestToKafka(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("01890a5d-ac96-774b-bcce-b302099a8057")
	m := outbox.Message{
		ID: id, Topic: "t", Key: nil, Payload: []byte("p"),
		Headers: map[string]string{"b": "2", "a": "1", outbox.HeaderEventID: "forged"},
	}
	got := toKafka(&m)
	if got.Key != nil || string(got.Value) != "p" || got.Topic != "t" {
		t.Errorf("toKafka = %+v", got)
	}
	var hs []string
	for _, h := range got.Headers {
		hs = append(hs, h.Key+"="+string(h.Value))
	}
	want := "a=1 b=2 outbox-event-id=01890a5d-ac96-774b-bcce-b302099a8057"
	if strings.Join(hs, " ") != want {
		t.Errorf("headers %q, want %q (sorted, forged id replaced)", hs, want)
	}
	if eventID(&got) != id.String() {
		t.Errorf("eventID = %q", eventID(&got))
	}
}

func TestMessageSize(t *testing.T) {
	t.Parallel()
	m := kafkago.Message{Key: []byte("key"), Value: make([]byte, 100),
		Headers: []kafkago.Header{{Key: "h", Value: make([]byte, 200)}}}
	// 22 fixed + 3 + 100, headers: count 1, name 1+1, value 2+200.
	if got, want := messageSize(&m), 22+3+100+1+2+202; got != want {
		t.Errorf("messageSize = %d, want %d", got, want)
	}
	for n, want := range map[int]int{0: 1, 63: 1, 64: 2, 8191: 2, 8192: 3} {
		if got := varintLen(n); got != want {
			t.Errorf("varintLen(%d) = %d, want %d", n, got, want)
		}
	}
}

// A partition's messages go in requests of at most BatchSize messages and
// MaxMessageBytes bytes, in order.
func TestProduceSplitsRequestsByCountAndBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		batchSize, maxBytes    int
		messages, payloadBytes int
		wantRequests           int
	}{
		{"by count", 10, 0, 35, 10, 4},
		{"by bytes", 100, 2000, 20, 300, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"t"}, Partitions: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Close)
			var requests atomic.Int64
			b.Cluster().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				b.Cluster().KeepControl()
				requests.Add(1)
				return nil, nil, false
			})
			p, err := New(Config{Brokers: b.Addrs(), BatchSize: tc.batchSize, MaxMessageBytes: tc.maxBytes})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			msgs := make([]outbox.Message, tc.messages)
			for i := range msgs {
				msgs[i] = outbox.Message{ID: uuid.New(), Topic: "t", Key: []byte("k"), Payload: make([]byte, tc.payloadBytes)}
				msgs[i].Payload[0] = byte(i)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := p.Publish(ctx, msgs); err != nil {
				t.Fatal(err)
			}
			if got := requests.Load(); got < int64(tc.wantRequests) {
				t.Errorf("%d produce requests for %d messages, want at least %d", got, tc.messages, tc.wantRequests)
			}
			recs := kafkatest.ReadTopic(t, b.Addrs(), "t", nil)
			if len(recs) != len(msgs) {
				t.Fatalf("read %d records, want %d", len(recs), len(msgs))
			}
			for i, r := range recs {
				if r.EventID() != msgs[i].ID.String() {
					t.Fatalf("record %d is event %s, want %s (in order)", i, r.EventID(), msgs[i].ID)
				}
			}
		})
	}
}

// A produce request refused with a retriable error is sent again whole:
// same keys, values and headers.
func TestProduceRetrySendsTheSameRecords(t *testing.T) {
	t.Parallel()
	b, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"t"}, Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	var refused atomic.Int64
	b.Cluster().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if refused.Add(1) > 2 {
			return nil, nil, false // the control is dropped: the third try goes through
		}
		b.Cluster().KeepControl()
		return kfakebroker.ProduceErrorResponse(req.(*kmsg.ProduceRequest), kerr.NotLeaderForPartition.Code), nil, true
	})
	p, err := New(Config{Brokers: b.Addrs(), MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	msgs := []outbox.Message{
		{ID: uuid.New(), Topic: "t", Key: []byte("k1"), Payload: []byte("first"), Headers: map[string]string{"h": "1"}},
		{ID: uuid.New(), Topic: "t", Key: []byte("k2"), Payload: []byte("second")},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if n := refused.Load(); n < 3 {
		t.Fatalf("%d produce requests, want 2 refused and 1 accepted", n)
	}
	recs := kafkatest.ReadTopic(t, b.Addrs(), "t", nil)
	if len(recs) != len(msgs) {
		t.Fatalf("read %d records, want %d", len(recs), len(msgs))
	}
	for i, r := range recs {
		if string(r.Key) != string(msgs[i].Key) || string(r.Value) != string(msgs[i].Payload) || r.EventID() != msgs[i].ID.String() {
			t.Errorf("record %d: key %q value %q id %s, want %q %q %s", i, r.Key, r.Value, r.EventID(), msgs[i].Key, msgs[i].Payload, msgs[i].ID)
		}
	}
	if h, _ := recs[0].Header("h"); h != "1" {
		t.Errorf("record 0 header h = %q, want 1", h)
	}
}

// A Publish cut short by its context sends nothing more for its messages
// once it has returned. (kafka-go's Writer kept trying its produce requests
// in the background, so a relay that had given the rows back to another
// replica published them again later.)
func TestPublishSendsNothingAfterItReturns(t *testing.T) {
	t.Parallel()
	var proxy *faultproxy.Proxy
	b, err := kfakebroker.Start(kfakebroker.Options{
		Topics: []string{"t"},
		Listen: faultproxy.ListenTo(&proxy),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	const writeTimeout = 300 * time.Millisecond
	p, err := New(Config{Brokers: b.Addrs(), WriteTimeout: writeTimeout, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var produces atomic.Int64 // produce requests written by the client
	p.transport.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &produceCounter{Conn: c, n: &produces}, nil
	}
	msgs := func(n int) []outbox.Message {
		out := make([]outbox.Message, n)
		for i := range out {
			out[i] = outbox.Message{ID: uuid.New(), Topic: "t", Key: []byte(fmt.Sprint(i)), Payload: []byte("x")}
		}
		return out
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.Publish(ctx, msgs(3)); err != nil { // connections and metadata in place
		t.Fatal(err)
	}

	warm := produces.Load()
	var received atomic.Int64 // produce requests the broker got from here on
	b.Cluster().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		received.Add(1)
		return nil, nil, false
	})

	// The context ends once a produce request has been written (to the
	// stalled broker), however long the machine took to get there.
	proxy.Stall()
	pctx, pcancel := context.WithCancel(t.Context())
	defer pcancel()
	returned := make(chan error, 1)
	go func() { returned <- p.Publish(pctx, msgs(6)) }()
	for deadline := time.Now().Add(time.Minute); produces.Load() == warm; {
		if len(returned) > 0 || time.Now().After(deadline) {
			t.Fatalf("no produce request written (Publish returned: %t)", len(returned) > 0)
		}
		time.Sleep(time.Millisecond) // polling the counter; the write has nothing to wait on
	}
	start := time.Now()
	pcancel()
	err = <-returned
	took := time.Since(start)
	if err == nil {
		t.Fatal("Publish succeeded through a stalled broker")
	}
	if took > 10*time.Second { // a safety net; TestPublishDeadlineIsUnavailable is about promptness
		t.Errorf("Publish took %v to return after its context ended", took)
	}
	sent := produces.Load() - warm
	// The broker stays stalled past the requests' timeout, then answers
	// again: what was written before Publish returned arrives, and nothing
	// else may. What is to be shown is that nothing happens, so watch for
	// longer than background retries would take (MaxAttempts requests of
	// up to WriteTimeout each, with backoff in between).
	time.Sleep(2 * writeTimeout)
	proxy.Heal()
	time.Sleep(3*writeTimeout + 2*produceBackoffMax)
	t.Logf("%d produce requests written before Publish returned, %d received", sent, received.Load())
	if got := received.Load(); got > sent {
		t.Errorf("the broker got %d produce requests, %d more than were written before Publish returned; want none written after", got, got-sent)
	}
}

// produceCounter counts the writes that start a Kafka produce request
// (API key 0 after the 4-byte size).
type produceCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c *produceCounter) Write(b []byte) (int, error) {
	if len(b) >= 6 && b[4] == 0 && b[5] == 0 {
		c.n.Add(1)
	}
	return c.Conn.Write(b)
}

func TestSASLMechanismErrorHidesPassword(t *testing.T) {
	t.Parallel()
	const password = "bell\u0007-secret-password" // SASLprep forbids control characters
	_, err := saslMechanism(SASLConfig{Mechanism: SASLScramSHA256, Username: "u", Password: password})
	if err == nil {
		t.Fatal("saslMechanism accepted a password SASLprep rejects")
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("error %v should wrap ErrInvalidConfig", err)
	}
	if strings.Contains(err.Error(), "secret-password") {
		t.Errorf("error holds the password: %v", err)
	}
}
