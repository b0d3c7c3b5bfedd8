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
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	kafkago "github.com/segmentio/kafka-go"

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
		{"nil", nil, "ok"},
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
			var gotKind string
			switch {
			case got == nil:
				gotKind = "ok"
			case publishers.IsPermanent(got):
				gotKind = "permanent"
			case errors.Is(got, publishers.ErrUnavailable):
				gotKind = "unavailable"
			default:
				gotKind = "transient"
			}
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

// write's safety net: when kafka-go itself refuses one message as larger
// than BatchBytes (failing the whole call), only that message fails.
func TestWriteMessageTooLargeSafetyNet(t *testing.T) {
	t.Parallel()
	b, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	p, err := New(Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	w := p.newWriter()
	w.BatchBytes = 300 // below the middle message, above the others
	t.Cleanup(func() { _ = w.Close() })

	var batch []kafkago.Message
	for i, size := range []int{10, 500, 20, 600} {
		m := outbox.Message{ID: uuid.New(), Topic: "t", Key: []byte(fmt.Sprint(i)), Payload: make([]byte, size)}
		batch = append(batch, toKafka(&m))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	errs, whole := p.write(ctx, w, batch)
	if whole != nil {
		t.Fatalf("write failed as a whole: %v", whole)
	}
	for i, wantErr := range []bool{false, true, false, true} {
		if (errs[i] != nil) != wantErr || (wantErr && !errors.Is(errs[i], kafkago.MessageSizeTooLarge)) {
			t.Errorf("message %d: %v, want error %t", i, errs[i], wantErr)
		}
	}
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
