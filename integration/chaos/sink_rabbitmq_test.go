package chaos

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/history"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

// rabbitMQSink is a RabbitMQ broker (OUTBOX_TEST_RABBITMQ_URL, or the one
// on this machine) behind a fault proxy. The run's two topics are routing
// keys on the default exchange, so each names a queue: the harness
// declares both, exclusive to its own connection (not proxied), so that
// the broker deletes them when it disconnects, and consumes them from the
// start. AMQP keeps no arrival time, so a record's time is when the
// harness received it, and its position the order in which it did (one
// channel consumes both queues; a queue delivers in its order).
type rabbitMQSink struct {
	url            string
	ordered, plain string
	proxy          *faultproxy.Proxy
	conn           *amqp.Connection
	ch             *amqp.Channel

	mu  sync.Mutex
	got []record
	wg  sync.WaitGroup
	// marked gets a queue's name when its consumer receives read's marker.
	marked chan string
}

// markerHeader marks the message read publishes behind the relays' ones.
const markerHeader = "outboxrelay-chaos-marker"

func newRabbitMQSink() *rabbitMQSink {
	s := &rabbitMQSink{url: envOr("OUTBOX_TEST_RABBITMQ_URL", rabbitmq.DefaultURL), marked: make(chan string, 2)}
	s.ordered, s.plain = runTopics()
	return s
}

func (s *rabbitMQSink) topics() (string, string) { return s.ordered, s.plain }
func (s *rabbitMQSink) kinds() []string          { return kindsWithoutErrors() }
func (s *rabbitMQSink) refuse(*float64)          {}
func (s *rabbitMQSink) refused() int64           { return 0 }

func (s *rabbitMQSink) where() string {
	return fmt.Sprintf("%s (proxy of %s), queues %s and %s on the default exchange", s.proxied(), s.conn.RemoteAddr(), s.ordered, s.plain)
}

// proxied is the broker's URL with the proxy's address.
func (s *rabbitMQSink) proxied() string {
	u, _ := url.Parse(s.url) // parsed in start
	u.Host = s.proxy.Addr()
	return u.Redacted()
}

func (s *rabbitMQSink) relayArgs() (args, env []string) {
	u, _ := url.Parse(s.url)
	u.Host = s.proxy.Addr()
	return []string{"--sink", "rabbitmq", "--rabbitmq-url", u.String(),
		"--rabbitmq-publish-timeout", publishTimeout.String(), "--rabbitmq-dial-timeout", "2s"}, nil
}

func (s *rabbitMQSink) start(ctx context.Context, t *testing.T) *faultproxy.Proxy {
	u, err := url.Parse(s.url)
	if err != nil || u.Port() == "" {
		t.Fatalf("OUTBOX_TEST_RABBITMQ_URL %q is not amqp://user:password@host:port/vhost", s.url)
	}
	if s.conn, err = amqp.Dial(s.url); err != nil {
		t.Fatalf("no RabbitMQ answers at %s (start rabbitmq-server, or set OUTBOX_TEST_RABBITMQ_URL): %v", u.Host, err)
	}
	t.Cleanup(func() {
		_ = s.conn.CloseDeadline(time.Now().Add(2 * time.Second)) // deletes the queues
		s.wg.Wait()
	})
	if s.ch, err = s.conn.Channel(); err != nil {
		t.Fatalf("rabbitmq: channel: %v", err)
	}
	for _, q := range []string{s.ordered, s.plain} {
		if _, err := s.ch.QueueDeclare(q, false, true, true, false, nil); err != nil { // not durable, auto-delete, exclusive
			t.Fatalf("rabbitmq: declare queue %s: %v", q, err)
		}
		// Consume, not ConsumeWithContext: amqp091-go v1.16 cancels such a
		// consumer from a goroutine that a closing connection can leave
		// waiting forever. The consumer ends with the connection.
		deliveries, err := s.ch.Consume(q, "outboxrelay-chaos-"+q, true, true, false, false, nil) // auto-ack, exclusive
		if err != nil {
			t.Fatalf("rabbitmq: consume queue %s: %v", q, err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for d := range deliveries { // ends when the channel closes
				if _, ok := d.Headers[markerHeader]; ok {
					s.marked <- q
					continue
				}
				id, _ := d.Headers[outbox.HeaderEventID].(string)
				key, _ := d.Headers[rabbitmq.HeaderKey].(string)
				s.mu.Lock()
				s.got = append(s.got, record{history.Delivery{EventID: id, Topic: q, Key: key,
					Offset: int64(d.DeliveryTag), Time: time.Now()}, string(d.Body)})
				s.mu.Unlock()
			}
		}()
	}
	if s.proxy, err = faultproxy.Start(u.Host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.proxy.Close() })
	return s.proxy
}

// read publishes a marker to each queue, behind everything the relays
// (stopped by now) published, waits until the consumers have received
// both (a queue delivers in order), then returns what they received.
func (s *rabbitMQSink) read(ctx context.Context, t *testing.T) []record {
	ch, err := s.conn.Channel()
	if err != nil {
		t.Fatalf("rabbitmq: channel: %v", err)
	}
	defer ch.Close()
	for _, q := range []string{s.ordered, s.plain} {
		if err := ch.PublishWithContext(ctx, "", q, true, false, amqp.Publishing{Headers: amqp.Table{markerHeader: true}}); err != nil {
			t.Fatalf("rabbitmq: publish the marker to %s: %v", q, err)
		}
	}
	for range 2 {
		select {
		case <-s.marked:
		case <-ctx.Done():
			t.Fatalf("rabbitmq: %v before the consumers got the markers", ctx.Err())
		case <-time.After(time.Minute):
			t.Fatalf("rabbitmq: the consumers did not get the markers within a minute of the drain")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]record(nil), s.got...)
}
