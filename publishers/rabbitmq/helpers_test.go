package rabbitmq_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

// envURL names the variable that points the tests at another broker.
const envURL = "OUTBOX_TEST_RABBITMQ_URL"

// brokerURL is the broker the tests use: $OUTBOX_TEST_RABBITMQ_URL, or
// RabbitMQ's defaults on this machine.
func brokerURL() string {
	if u := os.Getenv(envURL); u != "" {
		return u
	}
	return rabbitmq.DefaultURL
}

// proxied returns brokerURL with its host and port replaced by addr.
func proxied(t *testing.T, addr string) string {
	t.Helper()
	u, err := url.Parse(brokerURL())
	if err != nil {
		t.Fatalf("parse %s: %v", envURL, err)
	}
	u.Host = addr
	return u.String()
}

// brokerAddr is the host:port of brokerURL.
func brokerAddr(t testing.TB) string {
	t.Helper()
	uri, err := amqp.ParseURI(brokerURL())
	if err != nil {
		t.Fatalf("parse %s: %v", envURL, err)
	}
	u, _ := url.Parse(brokerURL())
	if u.Port() == "" {
		return uri.Host + ":5672"
	}
	return u.Host
}

// admin is the test's own connection to the broker, to declare queues and
// exchanges and to read messages back, closed when the test ends. It
// fails the test, saying how to start a broker, when none answers.
func admin(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(brokerURL(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatalf("RabbitMQ does not answer at %s: %v\n"+
			"start it (rabbitmq-server -detached, or docker run -d -p 5672:5672 rabbitmq:3), "+
			"or point %s at one (amqp://user:password@host:port/vhost)",
			redacted(brokerURL()), err, envURL)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	return u.Redacted()
}

// broker is the tests' view of RabbitMQ: an admin connection and what was
// read so far from each queue.
type broker struct {
	conn *amqp.Connection

	mu   sync.Mutex
	read map[string][]amqp.Delivery // by queue
}

func newBroker(t testing.TB) *broker {
	t.Helper()
	return &broker{conn: admin(t), read: map[string][]amqp.Delivery{}}
}

// do runs f on a channel of its own.
func (b *broker) do(t testing.TB, f func(ch *amqp.Channel) error) {
	t.Helper()
	ch, err := b.conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	defer ch.Close()
	if err := f(ch); err != nil {
		t.Fatal(err)
	}
}

// name returns a fresh name for an exchange or queue.
func name(kind string) string { return "outboxrelay-test-" + kind + "-" + uuid.NewString()[:13] }

// queue declares a fresh durable queue, deleted when the test ends (and
// by the broker 10 minutes after its last use, should the test crash).
// args are more queue arguments.
func (b *broker) queue(t testing.TB, args amqp.Table) string {
	t.Helper()
	q := name("queue")
	table := amqp.Table{"x-expires": int32(10 * time.Minute / time.Millisecond)}
	for k, v := range args {
		table[k] = v
	}
	b.do(t, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(q, true, false, false, false, table)
		return err
	})
	t.Cleanup(func() {
		b.cleanup(func(ch *amqp.Channel) error { _, err := ch.QueueDelete(q, false, false, false); return err })
	})
	return q
}

// exchange declares a fresh durable exchange of kind, deleted when the
// test ends.
func (b *broker) exchange(t *testing.T, kind string) string {
	t.Helper()
	ex := name("exchange")
	b.do(t, func(ch *amqp.Channel) error { return ch.ExchangeDeclare(ex, kind, true, false, false, false, nil) })
	t.Cleanup(func() { b.cleanup(func(ch *amqp.Channel) error { return ch.ExchangeDelete(ex, false, false) }) })
	return ex
}

// bind binds queue to exchange with key.
func (b *broker) bind(t *testing.T, queue, key, exchange string) {
	t.Helper()
	b.do(t, func(ch *amqp.Channel) error { return ch.QueueBind(queue, key, exchange, false, nil) })
}

// cleanup runs f on a channel of its own, ignoring failures: the broker
// drops what is left when its time comes.
func (b *broker) cleanup(f func(ch *amqp.Channel) error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	_ = f(ch)
}

// topic returns a fresh destination that takes messages: a queue bound
// with its own name to a fresh direct exchange, as "exchange/queue".
func (b *broker) topic(t *testing.T) string {
	t.Helper()
	ex, q := b.exchange(t, amqp.ExchangeDirect), b.queue(t, nil)
	b.bind(t, q, q, ex)
	return ex + "/" + q
}

// deliveries returns every message that arrived at queue so far, in
// arrival order: those read before and those waiting now, which it takes
// off the queue (basic.get until empty).
func (b *broker) deliveries(t *testing.T, queue string) []amqp.Delivery {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.do(t, func(ch *amqp.Channel) error {
		for {
			d, ok, err := ch.Get(queue, true)
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			b.read[queue] = append(b.read[queue], d)
		}
	})
	return append([]amqp.Delivery(nil), b.read[queue]...)
}

// records returns what arrived at topic ("exchange/queue", or a queue
// name) as the conformance suite sees it.
func (b *broker) records(t *testing.T, topic string) []publisherstest.Record {
	t.Helper()
	queue := topic[strings.Index(topic, "/")+1:]
	ds := b.deliveries(t, queue)
	out := make([]publisherstest.Record, len(ds))
	for i, d := range ds {
		out[i] = record(t, topic, queue, d)
	}
	return out
}

// record converts a delivery the way a consumer reads the sink's messages:
// the key from HeaderKey, the event id from message_id.
func record(t *testing.T, topic, queue string, d amqp.Delivery) publisherstest.Record {
	t.Helper()
	r := publisherstest.Record{Topic: topic, Stream: queue, Value: d.Body, EventID: d.MessageId, Headers: map[string]string{}}
	for k, v := range d.Headers {
		s, ok := v.(string)
		if !ok {
			t.Errorf("message %s: header %q is a %T, not a string", d.MessageId, k, v)
			continue
		}
		if k == rabbitmq.HeaderKey {
			r.Key = []byte(s)
			continue
		}
		r.Headers[k] = s
	}
	if d.DeliveryMode != amqp.Persistent {
		t.Errorf("message %s: delivery mode %d, want persistent (%d)", d.MessageId, d.DeliveryMode, amqp.Persistent)
	}
	return r
}

// newPublisher returns a publisher closed at the end of the test.
func newPublisher(t testing.TB, cfg rabbitmq.Config) *rabbitmq.Publisher {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = brokerURL()
	}
	p, err := rabbitmq.New(cfg)
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

// startProxy starts a fault proxy in front of the broker, closed when the
// test ends.
func startProxy(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	proxy, err := faultproxy.Start(brokerAddr(t))
	if err != nil {
		t.Fatalf("start fault proxy: %v", err)
	}
	t.Cleanup(func() {
		if err := proxy.Close(); err != nil {
			t.Errorf("close fault proxy: %v", err)
		}
	})
	return proxy
}

// testCtx returns a context that ends with the test or after d.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// msg returns a message with a fresh id; key "" means a nil key.
func msg(topic, key, payload string) outbox.Message {
	m := outbox.Message{ID: uuid.New(), Topic: topic, Payload: []byte(payload), Attempt: 1, CreatedAt: time.Now()}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}

// errorsAs is errors.As for a target type.
func errorsAs[T error](err error) (T, bool) {
	var target T
	ok := errors.As(err, &target)
	return target, ok
}
