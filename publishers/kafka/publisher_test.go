package kafka_test

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
)

func TestPublishRecordContent(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"orders"}})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs()})

	msgs := []outbox.Message{
		newMsg("orders", "customer-1", `{"n":1}`),
		newMsg("orders", "", `{"n":2}`), // nil key
		newMsg("orders", "customer-1", `{"n":3}`),
		{ID: uuid.New(), Topic: "orders", Key: []byte{}, Payload: []byte("empty key")},
		{ID: uuid.New(), Topic: "orders", Key: []byte("k"), Payload: nil},
	}
	msgs[0].Headers = map[string]string{"z-last": "3", "a-first": "1", "m-middle": "2", "content-type": "application/json"}
	msgs[2].Headers = map[string]string{"trace": "abc"}

	if err := p.Publish(testCtx(t, 10*time.Second), msgs); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	got := byEventID(t, readTopic(t, b.Addrs(), "orders"))
	if len(got) != len(msgs) {
		t.Fatalf("read %d records, want %d", len(got), len(msgs))
	}
	for i, m := range msgs {
		r, ok := got[m.ID]
		if !ok {
			t.Fatalf("message %d (%s) not found", i, m.ID)
		}
		if (r.Key == nil) != (m.Key == nil) || !bytes.Equal(r.Key, m.Key) {
			t.Errorf("message %d: key %q (nil %t), want %q (nil %t)", i, r.Key, r.Key == nil, m.Key, m.Key == nil)
		}
		if !bytes.Equal(r.Value, m.Payload) {
			t.Errorf("message %d: value %q, want %q", i, r.Value, m.Payload)
		}
		var wantHeaders []string
		for _, name := range slices.Sorted(mapsKeys(m.Headers)) {
			wantHeaders = append(wantHeaders, name+"="+m.Headers[name])
		}
		wantHeaders = append(wantHeaders, outbox.HeaderEventID+"="+m.ID.String())
		var gotHeaders []string
		for _, h := range r.Headers {
			gotHeaders = append(gotHeaders, h.Key+"="+string(h.Value))
		}
		if !slices.Equal(gotHeaders, wantHeaders) {
			t.Errorf("message %d: headers %q, want %q", i, gotHeaders, wantHeaders)
		}
	}
	// Same key, same partition, publish order.
	r0, r2 := got[msgs[0].ID], got[msgs[2].ID]
	if r0.Partition != r2.Partition || r0.Offset > r2.Offset {
		t.Errorf("same-key messages at %d/%d and %d/%d, want same partition in order", r0.Partition, r0.Offset, r2.Partition, r2.Offset)
	}
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Keyed messages must land where other clients put the same key. The
// expected partitions come from franz-go's partitioners, which document
// compatibility with the Java client (murmur2), librdkafka (crc32) and
// Sarama (fnv1a), and, for murmur2, from the published Java test vectors.
func TestPublishPartitioners(t *testing.T) {
	t.Parallel()
	const partitions = 7
	b := startBroker(t, kfakebroker.Options{Partitions: partitions})

	// Utils.murmur2 results from Kafka's UtilsTest.
	javaMurmur2 := []struct {
		key  string
		hash int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	}
	fnv32a := func(b []byte) uint32 {
		h := fnv.New32a()
		h.Write(b)
		return h.Sum32()
	}
	for _, tc := range []struct {
		name  string
		other kgo.Partitioner
	}{
		{kafka.PartitionerMurmur2, kgo.StickyKeyPartitioner(nil)},
		{kafka.PartitionerCRC32, kgo.StickyKeyPartitioner(kgo.SaramaHasher(crc32.ChecksumIEEE))},
		{kafka.PartitionerFNV1a, kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(fnv32a))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic := topicName("part-" + tc.name)
			createTopic(t, b.Addrs(), topic, partitions)
			p := newPublisher(t, kafka.Config{Brokers: b.Addrs(), Partitioner: tc.name})

			want := make(map[uuid.UUID]int)
			var msgs []outbox.Message
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			var keys []string
			javaPartition := map[string]int{}
			for _, v := range javaMurmur2 {
				keys = append(keys, v.key)
				javaPartition[v.key] = int(uint32(v.hash)&0x7fffffff) % partitions
			}
			for i := 0; i < 200; i++ {
				key := make([]byte, 1+rng.IntN(40))
				for j := range key {
					key[j] = byte(rng.Uint32())
				}
				keys = append(keys, string(key))
			}
			other := tc.other.ForTopic(topic)
			for _, key := range keys {
				m := newMsg(topic, key, "v")
				want[m.ID] = other.Partition(&kgo.Record{Key: []byte(key)}, partitions)
				if java, ok := javaPartition[key]; ok && tc.name == kafka.PartitionerMurmur2 && java != want[m.ID] {
					t.Fatalf("franz-go and Java disagree on %q: %d vs %d", key, want[m.ID], java)
				}
				msgs = append(msgs, m)
			}
			if err := p.Publish(testCtx(t, 10*time.Second), msgs); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			got := byEventID(t, readTopic(t, b.Addrs(), topic))
			if len(got) != len(msgs) {
				t.Fatalf("read %d records, want %d", len(got), len(msgs))
			}
			used := map[int]bool{}
			for _, m := range msgs {
				r := got[m.ID]
				used[r.Partition] = true
				if r.Partition != want[m.ID] {
					t.Errorf("key %q on partition %d, want %d", m.Key, r.Partition, want[m.ID])
				}
			}
			if len(used) != partitions {
				t.Errorf("keys spread over %d partitions, want all %d", len(used), partitions)
			}
		})
	}

	t.Run(kafka.PartitionerRoundRobin, func(t *testing.T) {
		t.Parallel()
		topic := topicName("part-rr")
		createTopic(t, b.Addrs(), topic, partitions)
		p := newPublisher(t, kafka.Config{Brokers: b.Addrs(), Partitioner: kafka.PartitionerRoundRobin})
		var msgs []outbox.Message
		for i := 0; i < 3*partitions; i++ {
			msgs = append(msgs, newMsg(topic, "same-key", fmt.Sprint(i)))
		}
		if err := p.Publish(testCtx(t, 10*time.Second), msgs); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		count := map[int]int{}
		for _, r := range readTopic(t, b.Addrs(), topic) {
			count[r.Partition]++
		}
		for part := 0; part < partitions; part++ {
			if count[part] != 3 {
				t.Errorf("partition %d got %d records, want 3 (round-robin ignores keys): %v", part, count[part], count)
			}
		}
	})
}

func TestPublishUnknownTopicFailsOnlyItsMessages(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"known"}}) // no auto-create
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs()})

	msgs := []outbox.Message{
		newMsg("known", "a", "1"),
		newMsg("missing", "a", "2"),
		newMsg("known", "b", "3"),
		newMsg("missing", "", "4"),
	}
	start := time.Now()
	err := p.Publish(testCtx(t, 10*time.Second), msgs)
	var each publishers.Errors
	if !errors.As(err, &each) {
		t.Fatalf("Publish = %v, want publishers.Errors", err)
	}
	errs := perMessage(t, err, len(msgs))
	for i, want := range []string{"acknowledged", "permanent", "acknowledged", "permanent"} {
		if got := publishers.ClassOf(errs[i]).String(); got != want {
			t.Errorf("message %d (%s): %s (%v), want %s", i, msgs[i].Topic, got, errs[i], want)
		}
	}
	if !errors.Is(errs[1], kafkago.UnknownTopicOrPartition) || !strings.Contains(errs[1].Error(), `"missing"`) {
		t.Errorf("error %q should wrap UnknownTopicOrPartition and name the topic", errs[1])
	}
	if d := time.Since(start); d > 8*time.Second { // below the context's and WriteTimeout's 10s
		t.Errorf("Publish took %v", d)
	}
	got := byEventID(t, readTopic(t, b.Addrs(), "known"))
	if _, ok := got[msgs[0].ID]; !ok || len(got) != 2 {
		t.Errorf("topic known holds %d records, want messages 0 and 2", len(got))
	}

	// A call with only the missing topic fails as a whole.
	err = p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("missing", "", "x")})
	var list publishers.Errors
	if publishers.ClassOf(err).String() != "permanent" || errors.As(err, &list) {
		t.Errorf("single-topic failure = %T %v, want one permanent error", err, err)
	}
}

// kafka-go caches metadata for seconds; a topic created in between must not
// fail permanently.
func TestPublishNewTopicIsNotPermanent(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"warm"}})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs()})
	if err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("warm", "k", "1")}); err != nil {
		t.Fatalf("warm-up Publish: %v", err)
	}
	createTopic(t, b.Addrs(), "fresh", 3)

	deadline := time.Now().Add(20 * time.Second)
	for attempt := 1; ; attempt++ {
		err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("fresh", "k", fmt.Sprint(attempt))})
		if err == nil {
			break
		}
		if k := publishers.ClassOf(err).String(); k != "transient" {
			t.Fatalf("attempt %d on a new topic: %s: %v", attempt, k, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("new topic still failing after 20s: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // retry pacing, as the relay's backoff would
	}
}

func TestPublishMessageLargerThanMaxMessageBytes(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"big"}})
	const limit = 10_000
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs(), MaxMessageBytes: limit})

	msgs := []outbox.Message{
		newMsg("big", "k", "small-1"),
		newMsg("big", "k", strings.Repeat("x", 2*limit)),
		newMsg("big", "k", "small-2"),
	}
	errs := perMessage(t, p.Publish(testCtx(t, 10*time.Second), msgs), len(msgs))
	for i, want := range []string{"acknowledged", "permanent", "acknowledged"} {
		if got := publishers.ClassOf(errs[i]).String(); got != want {
			t.Errorf("message %d: %s (%v), want %s", i, got, errs[i], want)
		}
	}
	if !errors.Is(errs[1], kafkago.MessageSizeTooLarge) {
		t.Errorf("error %v should wrap kafka-go's MessageSizeTooLarge", errs[1])
	}
	got := byEventID(t, readTopic(t, b.Addrs(), "big"))
	if len(got) != 2 {
		t.Errorf("topic holds %d records, want the 2 small ones", len(got))
	}
	if _, ok := got[msgs[1].ID]; ok {
		t.Error("the oversized message reached the broker")
	}
}

// The size check must never be more lenient than kafka-go's own: a message
// at exactly MaxMessageBytes goes through, one byte more is refused.
func TestPublishMaxMessageBytesBoundary(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"edge"}})
	const limit = 4096
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs(), MaxMessageBytes: limit})

	// Size as kafka-go counts it: 22 bytes of overhead (CRC 4, magic 1,
	// attributes 1, timestamp 8, key and value lengths 4+4), the key, the
	// value, and the headers with varint lengths: count (1), name length
	// (1), "outbox-event-id" (15), value length (1), canonical UUID (36).
	const overhead = 22 + 1 + 1 + 15 + 1 + 36
	exact := newMsg("edge", "key", strings.Repeat("v", limit-overhead-3))
	over := newMsg("edge", "key", strings.Repeat("v", limit-overhead-3+1))
	errs := perMessage(t, p.Publish(testCtx(t, 10*time.Second), []outbox.Message{exact, over}), 2)
	if errs[0] != nil {
		t.Errorf("message of exactly MaxMessageBytes: %v", errs[0])
	}
	if publishers.ClassOf(errs[1]).String() != "permanent" || !strings.Contains(errs[1].Error(), "exceeds MaxMessageBytes") {
		t.Errorf("message one byte over MaxMessageBytes: %s (%v), want permanent from Publish's own check", publishers.ClassOf(errs[1]).String(), errs[1])
	}
}

// When the broker rejects a batch for one record (here: larger than the
// broker's message.max.bytes, which the client's limit does not catch),
// only that record fails; the others of the batch are delivered.
func TestPublishBrokerRejectedBatchFailsOnlyTheCulprit(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"strict"}, Partitions: 1, MaxMessageBytes: 20_000})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs()})

	var msgs []outbox.Message
	for i := 0; i < 9; i++ {
		payload := fmt.Sprint("small-", i)
		if i == 5 {
			payload = strings.Repeat("x", 30_000)
		}
		msgs = append(msgs, newMsg("strict", "same-key", payload))
	}
	errs := perMessage(t, p.Publish(testCtx(t, 20*time.Second), msgs), len(msgs))
	for i := range msgs {
		want := "acknowledged"
		if i == 5 {
			want = "permanent"
		}
		if got := publishers.ClassOf(errs[i]).String(); got != want {
			t.Errorf("message %d: %s (%v), want %s", i, got, errs[i], want)
		}
	}
	if !errors.Is(errs[5], kafkago.MessageSizeTooLarge) {
		t.Errorf("culprit's error %v should wrap MessageSizeTooLarge", errs[5])
	}
	recs := readTopic(t, b.Addrs(), "strict")
	if len(recs) != 8 {
		t.Fatalf("topic holds %d records, want 8", len(recs))
	}
	// The survivors keep their relative order.
	var order []string
	for _, r := range recs {
		order = append(order, string(r.Value))
	}
	if !slices.IsSorted(order) {
		t.Errorf("survivors out of order: %q", order)
	}
}

func TestPublishBrokerDownIsUnavailable(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"t"}})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs()})
	if err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("t", "k", "before")}); err != nil {
		t.Fatalf("Publish before stop: %v", err)
	}
	b.Close()

	start := time.Now()
	err := p.Publish(testCtx(t, 30*time.Second), []outbox.Message{newMsg("t", "k", "1"), newMsg("t", "other", "2")})
	elapsed := time.Since(start)
	if !errors.Is(err, publishers.ErrUnavailable) {
		t.Fatalf("Publish to a stopped broker = %v, want ErrUnavailable", err)
	}
	var each publishers.Errors
	if errors.As(err, &each) {
		t.Errorf("sink-wide failure returned per message: %v", err)
	}
	if elapsed > 12*time.Second { // below three DialTimeouts (15s) and the context's 30s
		t.Errorf("Publish took %v to report the outage", elapsed)
	}
}

func TestPublishNoBrokerEverIsUnavailable(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, kafka.Config{Brokers: []string{fmt.Sprintf("127.0.0.1:%d", freePort(t))}})
	start := time.Now()
	err := p.Publish(testCtx(t, 30*time.Second), []outbox.Message{newMsg("a", "k", "1"), newMsg("b", "k", "2")})
	if !errors.Is(err, publishers.ErrUnavailable) {
		t.Fatalf("Publish without broker = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 12*time.Second { // below three DialTimeouts (15s) and the context's 30s
		t.Errorf("Publish took %v", d)
	}
}

// A broker stopped and started again on the same address is found again.
func TestPublishRecoversAfterBrokerRestart(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	opts := kfakebroker.Options{Port: port, Topics: []string{"t"}}
	b := startBroker(t, opts)
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs()})
	if err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("t", "k", "1")}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	b.Close()
	if err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("t", "k", "2")}); !errors.Is(err, publishers.ErrUnavailable) {
		t.Fatalf("Publish while down = %v, want ErrUnavailable", err)
	}
	b2 := startBroker(t, opts)

	deadline := time.Now().Add(20 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("t", "k", "3")}); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // retry pacing, as the relay's backoff would
	}
	if err != nil {
		t.Fatalf("Publish after restart still failing: %v", err)
	}
	if n := len(readTopic(t, b2.Addrs(), "t")); n != 1 {
		t.Errorf("restarted (in-memory) broker holds %d records, want 1", n)
	}
}

// A retriable broker error (NOT_ENOUGH_REPLICAS on every produce) is
// transient: neither permanent nor unavailable, after MaxAttempts tries.
func TestPublishRetriableBrokerErrorIsTransient(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"t"}})
	var produces atomic.Int32
	b.Cluster().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		produces.Add(1)
		return kfakebroker.ProduceErrorResponse(req.(*kmsg.ProduceRequest), kerr.NotEnoughReplicas.Code), nil, true
	})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs(), MaxAttempts: 2})

	err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("t", "k", "1"), newMsg("t", "k", "2")})
	if publishers.ClassOf(err).String() != "transient" {
		t.Fatalf("Publish = %s %v, want transient", publishers.ClassOf(err).String(), err)
	}
	if !errors.Is(err, kafkago.NotEnoughReplicas) {
		t.Errorf("error %v should wrap NotEnoughReplicas", err)
	}
	if n := produces.Load(); n != 2 {
		t.Errorf("broker saw %d produce requests, want MaxAttempts = 2", n)
	}
}

// A broker that never answers: the publish context's deadline ends the
// call, as an unavailable sink.
func TestPublishDeadlineIsUnavailable(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"t"}})
	b.Cluster().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		return nil, nil, true // swallow the request: no response
	})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs(), WriteTimeout: 300 * time.Millisecond, MaxAttempts: 1})

	start := time.Now()
	err := p.Publish(testCtx(t, 200*time.Millisecond), []outbox.Message{newMsg("t", "k", "1")})
	if !errors.Is(err, publishers.ErrUnavailable) {
		t.Fatalf("Publish = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 10*time.Second { // a safety net: the broker never answers
		t.Errorf("Publish returned after %v, want about the 200ms deadline", d)
	}
}

func TestPublishSASL(t *testing.T) {
	t.Parallel()
	const password = "s3cret-Pa55w0rd-never-logged"
	b := startBroker(t, kfakebroker.Options{
		Topics: []string{"t"},
		Users: []kfakebroker.User{
			{Mechanism: kfakebroker.MechanismPlain, Name: "plain-user", Password: password},
			{Mechanism: kfakebroker.MechanismScramSHA256, Name: "scram256-user", Password: password},
			{Mechanism: kfakebroker.MechanismScramSHA512, Name: "scram512-user", Password: password},
		},
	})
	for _, tc := range []struct {
		mechanism, user string
	}{
		{kafka.SASLPlain, "plain-user"},
		{kafka.SASLScramSHA256, "scram256-user"},
		{kafka.SASLScramSHA512, "scram512-user"},
	} {
		t.Run(tc.mechanism, func(t *testing.T) {
			t.Parallel()
			good := newPublisher(t, kafka.Config{Brokers: b.Addrs(),
				SASL: kafka.SASLConfig{Mechanism: tc.mechanism, Username: tc.user, Password: password}})
			m := newMsg("t", "k", tc.mechanism)
			if err := good.Publish(testCtx(t, 10*time.Second), []outbox.Message{m}); err != nil {
				t.Fatalf("Publish with the right password: %v", err)
			}
			if _, ok := byEventID(t, readTopicSASL(t, b, "t"))[m.ID]; !ok {
				t.Error("message not found on the broker")
			}

			const wrong = "wr0ng-Pa55w0rd-also-secret"
			bad := newPublisher(t, kafka.Config{Brokers: b.Addrs(),
				SASL: kafka.SASLConfig{Mechanism: tc.mechanism, Username: tc.user, Password: wrong}})
			err := bad.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("t", "k", "x")})
			if err == nil {
				t.Fatal("Publish with a wrong password succeeded")
			}
			if !errors.Is(err, publishers.ErrUnavailable) {
				t.Errorf("authentication failure = %s %v, want unavailable (no message is at fault)", publishers.ClassOf(err).String(), err)
			}
			mustNotContain(t, "error", err.Error(), wrong)
			mustNotContain(t, "error", err.Error(), password)
			mustNotContain(t, "error", publishers.Describe(err), wrong)
		})
	}
}

// readTopicSASL reads topic from a SASL broker with kafka-go, as the
// superuser "plain-user".
func readTopicSASL(t *testing.T, b *kfakebroker.Broker, topic string) []record {
	t.Helper()
	return kafkatest.ReadTopic(t, b.Addrs(), topic, &kafkago.Transport{SASL: plainMechanism("plain-user", "s3cret-Pa55w0rd-never-logged")})
}

func TestPublishTLS(t *testing.T) {
	t.Parallel()
	files, err := kfakebroker.GenerateTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, kfakebroker.Options{Topics: []string{"t"}, TLS: files.Server})

	for _, tc := range []struct {
		name             string
		ca, cert, key    string
		skipVerify, want bool
	}{
		{name: "ca", ca: files.CAFile, want: true},
		{name: "mutual", ca: files.CAFile, cert: files.CertFile, key: files.KeyFile, want: true},
		{name: "insecure-skip-verify", skipVerify: true, want: true},
		{name: "system-roots", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tlsCfg, err := kafka.LoadTLS(tc.ca, tc.cert, tc.key, tc.skipVerify)
			if err != nil {
				t.Fatalf("LoadTLS: %v", err)
			}
			p := newPublisher(t, kafka.Config{Brokers: b.Addrs(), TLS: tlsCfg})
			err = p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("t", "k", tc.name)})
			switch {
			case tc.want && err != nil:
				t.Fatalf("Publish over TLS: %v", err)
			case !tc.want && !errors.Is(err, publishers.ErrUnavailable):
				t.Fatalf("Publish with an untrusted broker certificate = %v, want ErrUnavailable", err)
			}
		})
	}

	// A plaintext client cannot talk to the TLS broker: unavailable.
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs(), DialTimeout: time.Second, WriteTimeout: time.Second})
	if err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("t", "k", "plain")}); !errors.Is(err, publishers.ErrUnavailable) {
		t.Errorf("plaintext Publish to a TLS broker = %v, want ErrUnavailable", err)
	}
}

// Publish is synchronous: it must not wait out kafka-go's 1 s default
// BatchTimeout for the partial batch of each partition.
func TestPublishBatchDoesNotWaitForBatchTimeout(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"fast"}, Partitions: 3})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs()})
	ctx := testCtx(t, 30*time.Second)

	// Warm up connections and metadata, then time a few batches.
	if err := p.Publish(ctx, []outbox.Message{newMsg("fast", "k", "warm")}); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	var slowest time.Duration
	for round := 0; round < 3; round++ {
		msgs := make([]outbox.Message, 500)
		for i := range msgs {
			msgs[i] = newMsg("fast", fmt.Sprint("key-", i), strings.Repeat("p", 200))
		}
		start := time.Now()
		if err := p.Publish(ctx, msgs); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		slowest = max(slowest, time.Since(start))
	}
	t.Logf("slowest batch of 500 messages over 3 partitions: %v", slowest)
	// A batch that waited out the BatchTimeout took 1s or more; anything
	// less shows it did not (500ms left a busy machine too little room).
	if slowest >= time.Second {
		t.Errorf("a batch of 500 took %v, want under kafka-go's 1 s BatchTimeout", slowest)
	}
	if n := len(readTopic(t, b.Addrs(), "fast")); n != 1+3*500 {
		t.Errorf("topic holds %d records, want %d", n, 1+3*500)
	}
}

func TestPublishInvalidTopicIsPermanent(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"ok"}})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs()})
	msgs := []outbox.Message{newMsg("ok", "k", "1"), newMsg("", "k", "2"), newMsg("bad topic!", "k", "3")}
	errs := perMessage(t, p.Publish(testCtx(t, 10*time.Second), msgs), len(msgs))
	for i, want := range []string{"acknowledged", "permanent", "permanent"} {
		if got := publishers.ClassOf(errs[i]).String(); got != want {
			t.Errorf("message %d: %s (%v), want %s", i, got, errs[i], want)
		}
	}
	if !errors.Is(errs[1], outbox.ErrInvalidTopic) {
		t.Errorf("error %v should wrap outbox.ErrInvalidTopic", errs[1])
	}
}

func TestPublishEmptyAndClosed(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"t"}})
	p, err := kafka.New(kafka.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(testCtx(t, 10*time.Second), nil); err != nil {
		t.Errorf("Publish(nil) = %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("t", "k", "1")}); !errors.Is(err, kafka.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}

func TestPublishCanceledContext(t *testing.T) {
	t.Parallel()
	b := startBroker(t, kfakebroker.Options{Topics: []string{"t"}})
	p := newPublisher(t, kafka.Config{Brokers: b.Addrs()})
	ctx, cancel := contextWithCancel(t)
	cancel()
	err := p.Publish(ctx, []outbox.Message{newMsg("t", "k", "1")})
	if publishers.ClassOf(err).String() != "transient" || !errors.Is(err, errCanceled) {
		t.Errorf("Publish with a canceled context = %s %v, want the plain cancellation", publishers.ClassOf(err).String(), err)
	}
	if n := len(readTopic(t, b.Addrs(), "t")); n != 0 {
		t.Errorf("a canceled Publish sent %d records", n)
	}
}
