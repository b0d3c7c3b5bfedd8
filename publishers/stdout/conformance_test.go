package stdout_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
	"github.com/outboxrelay/outboxrelay/publishers/stdout"
)

// TestConformance runs the sink conformance suite against publishers that
// share one writer, which the harness can make fail (a closed pipe: the
// stdout sink's "broker going away").
func TestConformance(t *testing.T) {
	t.Parallel()
	w := &switchWriter{}
	publisherstest.Run(t, publisherstest.Harness{
		Name: "stdout",
		// A line written is not stored anywhere (no DurableAcks); the sink
		// never refuses a message and has no size limit; it writes to an
		// io.Writer, whose blocked Write nothing can interrupt (no Stall).
		Features: publisherstest.Features{KeyOrder: true, Outage: true},
		New:      func(*testing.T) publishers.Publisher { return stdout.New(w) },
		Topic:    func(*testing.T) string { return topicName() },
		Read:     func(t *testing.T, topic string) []publisherstest.Record { return w.read(t, topic) },
		Cut:      func() { w.setBroken(true) },
		Heal:     func() { w.setBroken(false) },
	})
}

var topicSeq atomic.Int64

// topicName returns a topic name unique within the test binary.
func topicName() string { return "conformance-" + strconv.FormatInt(topicSeq.Add(1), 10) }

// switchWriter collects lines, or fails every Write while broken.
type switchWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	broken bool
}

func (w *switchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken {
		return 0, syscall.EPIPE
	}
	return w.buf.Write(p)
}

func (w *switchWriter) setBroken(b bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.broken = b
}

// read parses every line written so far and returns those of topic.
func (w *switchWriter) read(t *testing.T, topic string) []publisherstest.Record {
	t.Helper()
	w.mu.Lock()
	data := bytes.Clone(w.buf.Bytes())
	w.mu.Unlock()
	var out []publisherstest.Record
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var l struct {
			ID            string            `json:"id"`
			Topic         string            `json:"topic"`
			Key           *string           `json:"key"`
			KeyBase64     *string           `json:"key_base64"`
			Payload       string            `json:"payload"`
			PayloadBase64 *string           `json:"payload_base64"`
			Headers       map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if l.Topic != topic {
			continue
		}
		r := publisherstest.Record{Topic: l.Topic, Stream: "stdout", Value: []byte(l.Payload), Headers: l.Headers, EventID: l.ID}
		if l.Key != nil {
			r.Key = []byte(*l.Key)
		}
		if l.KeyBase64 != nil {
			r.Key = decode(t, *l.KeyBase64)
		}
		if l.PayloadBase64 != nil {
			r.Value = decode(t, *l.PayloadBase64)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func decode(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("base64 %q: %v", s, errors.Unwrap(err))
	}
	return b
}
