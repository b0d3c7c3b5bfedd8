package kafka_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
)

// The publisher declares that it takes several events of one key in one
// call (publishers.KeyBatcher); the tests below hold it to that.
var _ publishers.KeyBatcher = (*kafka.Publisher)(nil)

// produceLog records the produce requests a broker saw, in order, by the
// payloads of their records, and answers some of them with an error.
type produceLog struct {
	mu       sync.Mutex
	requests [][]string // the payloads each request carried
}

// refuse installs a Produce control on b: refusal(n, payloads) is called
// for the n-th request (from 1) with the payloads it carries, among
// candidates, and returns the error code to answer it with, or 0 to let
// the broker take it.
func (l *produceLog) refuse(b *kfakebroker.Broker, candidates []string, refusal func(n int, payloads []string) int16) {
	b.Cluster().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		var payloads []string
		for _, t := range pr.Topics {
			for _, p := range t.Partitions {
				// The records are sent uncompressed: each payload can be
				// found in the raw batch.
				for _, c := range candidates {
					if bytes.Contains(p.Records, []byte(c)) {
						payloads = append(payloads, c)
					}
				}
			}
		}
		l.mu.Lock()
		l.requests = append(l.requests, payloads)
		n := len(l.requests)
		l.mu.Unlock()
		if code := refusal(n, payloads); code != 0 {
			return kfakebroker.ProduceErrorResponse(pr, code), nil, true
		}
		return nil, nil, false
	})
}

func (l *produceLog) seen() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]string(nil), l.requests...)
}

// keyRun returns n messages of one key on topic, with payloads "<key>-<i>"
// padded so that no payload contains another.
func keyRun(topic, key string, n int) ([]outbox.Message, []string) {
	msgs := make([]outbox.Message, n)
	payloads := make([]string, n)
	for i := range msgs {
		payloads[i] = fmt.Sprintf("<%s-%03d>", key, i)
		msgs[i] = newMsg(topic, key, payloads[i])
	}
	return msgs, payloads
}

// arrived returns the payloads read back from topic, in partition order.
func arrived(t *testing.T, b *kfakebroker.Broker, topic string) []string {
	t.Helper()
	var out []string
	for _, r := range readTopic(t, b.Addrs(), topic) {
		out = append(out, string(r.Value))
	}
	return out
}

// A key's run split over several produce requests: when one fails for
// good (a retriable error, MaxAttempts times), the requests behind it are
// not sent, and their messages fail without being permanent: what arrived
// is the run's acknowledged prefix, in order.
func TestKeyBatchesStopAtTheFirstFailedRequest(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"t"}, Partitions: 1})
	msgs, payloads := keyRun("t", "k", 10)
	var log produceLog
	log.refuse(b, payloads, func(n int, _ []string) int16 {
		if n == 2 || n == 3 { // the second request, and its one retry
			return kerr.NotEnoughReplicas.Code
		}
		return 0
	})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs(), BatchSize: 3, MaxAttempts: 2})

	errs := perMessage(t, p.Publish(testCtx(t, 10*time.Second), msgs), len(msgs))
	for i, err := range errs {
		switch {
		case i < 3 && err != nil:
			t.Errorf("message %d, in the first request: %v, want acknowledged", i, err)
		case i >= 3 && err == nil:
			t.Errorf("message %d, behind the failed request, was acknowledged", i)
		case i >= 3 && publishers.IsPermanent(err):
			t.Errorf("message %d: %v is permanent; the failure was not the message's", i, err)
		}
	}
	if got, want := arrived(t, b, "t"), payloads[:3]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("arrived %v, want the acknowledged prefix %v", got, want)
	}
	if got := log.seen(); len(got) != 3 {
		t.Errorf("broker saw %d produce requests %v, want 3: the first, the second twice, none after it", len(got), got)
	}
}

// A request refused once and taken on its retry: the run arrives whole, in
// order, with nothing sent twice (the refused request was not appended).
func TestKeyBatchesRetriedRequestKeepsOrder(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"t"}, Partitions: 1})
	msgs, payloads := keyRun("t", "k", 10)
	var log produceLog
	log.refuse(b, payloads, func(n int, _ []string) int16 {
		if n == 2 {
			return kerr.NotLeaderForPartition.Code
		}
		return 0
	})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs(), BatchSize: 3, MaxAttempts: 3})

	if err := p.Publish(testCtx(t, 10*time.Second), msgs); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got := arrived(t, b, "t"); fmt.Sprint(got) != fmt.Sprint(payloads) {
		t.Errorf("arrived %v, want %v", got, payloads)
	}
}

// A batch the broker rejects for one record's content is re-sent in halves
// to find that record (isolation). A message that fails there for another
// reason stops the halves behind it: its key's later messages are not
// sent, so they cannot overtake it when it is retried; the culprit before
// them fails permanently and holds nothing back.
func TestKeyBatchesIsolationStopsAtATransientFailure(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"t"}, Partitions: 1})
	msgs, payloads := keyRun("t", "k", 6)
	poison, victim := payloads[1], payloads[0]
	var log produceLog
	log.refuse(b, payloads, func(_ int, carried []string) int16 {
		for _, c := range carried {
			if c == poison {
				return kerr.InvalidRecord.Code // the culprit's content
			}
		}
		if len(carried) == 1 && carried[0] == victim {
			return kerr.NotEnoughReplicas.Code // the first half, sent alone, fails transiently
		}
		return 0
	})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs(), MaxAttempts: 1})

	errs := perMessage(t, p.Publish(testCtx(t, 10*time.Second), msgs), len(msgs))
	if errs[0] == nil || publishers.IsPermanent(errs[0]) {
		t.Errorf("message 0 (failed transiently alone): %v, want a transient error", errs[0])
	}
	for i := 2; i < len(msgs); i++ {
		if errs[i] == nil || publishers.IsPermanent(errs[i]) {
			t.Errorf("message %d, behind the transient failure: %v, want a transient error (not sent)", i, errs[i])
		}
	}
	if got := arrived(t, b, "t"); len(got) != 0 {
		t.Errorf("arrived %v, want nothing: the first message failed, the rest must wait behind it", got)
	}
	for _, req := range log.seen() {
		for _, c := range req {
			if c == payloads[3] || c == payloads[4] || c == payloads[5] {
				if len(req) < len(payloads) { // only the first, whole-batch request may carry them
					t.Errorf("request %v sent messages behind the failed one", req)
				}
			}
		}
	}
}

// Without a transient failure, isolation finds the culprit, fails it
// permanently, and delivers the rest of its key in order.
func TestKeyBatchesIsolationDeliversAroundTheCulprit(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"t"}, Partitions: 1})
	msgs, payloads := keyRun("t", "k", 6)
	poison := payloads[2]
	var log produceLog
	log.refuse(b, payloads, func(_ int, carried []string) int16 {
		for _, c := range carried {
			if c == poison {
				return kerr.InvalidRecord.Code
			}
		}
		return 0
	})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs(), MaxAttempts: 1})

	errs := perMessage(t, p.Publish(testCtx(t, 10*time.Second), msgs), len(msgs))
	for i, err := range errs {
		if i == 2 {
			if !publishers.IsPermanent(err) {
				t.Errorf("the culprit: %v, want permanent", err)
			}
		} else if err != nil {
			t.Errorf("message %d: %v, want acknowledged", i, err)
		}
	}
	want := []string{payloads[0], payloads[1], payloads[3], payloads[4], payloads[5]}
	if got := arrived(t, b, "t"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("arrived %v, want %v", got, want)
	}
}
