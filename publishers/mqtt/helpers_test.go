package mqttsink_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/emulators"
	"github.com/outboxrelay/outboxrelay/outbox"
	mqttsink "github.com/outboxrelay/outboxrelay/publishers/mqtt"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
)

// broker starts a private Mosquitto for the test and returns its host:port.
func broker(t testing.TB) string {
	t.Helper()
	e, err := emulators.Mosquitto()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return strings.TrimPrefix(e.Endpoint, "mqtt://")
}

// subscriber is a test client subscribed (QoS 1) to the topics it is
// given, collecting what arrives.
type subscriber struct {
	c    *paho.Client
	mu   sync.Mutex
	got  map[string][]*paho.Publish
	wake chan struct{} // signalled on each arrival
}

func subscribe(t testing.TB, addr string) *subscriber {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &subscriber{got: map[string][]*paho.Publish{}, wake: make(chan struct{}, 1)}
	s.c = paho.NewClient(paho.ClientConfig{Conn: nc, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(r paho.PublishReceived) (bool, error) {
			s.mu.Lock()
			s.got[r.Packet.Topic] = append(s.got[r.Packet.Topic], r.Packet)
			s.mu.Unlock()
			select {
			case s.wake <- struct{}{}:
			default:
			}
			return true, nil
		},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.c.Connect(ctx, &paho.Connect{ClientID: "test-sub-" + uuid.NewString(), CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.c.Disconnect(&paho.Disconnect{}) })
	return s
}

// topic subscribes to a fresh topic and returns it.
func (s *subscriber) topic(t testing.TB) string {
	t.Helper()
	topic := fmt.Sprintf("test/%08x", rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	return topic
}

// read publishes a marker to topic with the subscriber's own connection,
// waits until it arrives (Mosquitto forwards a topic's messages in the
// order it took them, so everything acknowledged before is in), and
// returns the records that arrived before it.
func (s *subscriber) read(t testing.TB, topic string) []publisherstest.Record {
	t.Helper()
	marker := uuid.NewString()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.c.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: []byte(marker)}); err != nil {
		t.Fatal(err)
	}
	for {
		s.mu.Lock()
		got := s.got[topic]
		for i, p := range got {
			if string(p.Payload) == marker {
				s.got[topic] = append(got[:i:i], got[i+1:]...)
				s.mu.Unlock()
				return records(t, got[:i])
			}
		}
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-ctx.Done():
			t.Fatalf("the read marker of %s did not arrive", topic)
		}
	}
}

// records converts what arrived, checking the key properties.
func records(t testing.TB, got []*paho.Publish) []publisherstest.Record {
	out := make([]publisherstest.Record, len(got))
	for i, p := range got {
		key, err := mqttsink.Key(p.Properties.User)
		if err != nil {
			t.Errorf("message %d: %v", i, err)
		}
		headers := map[string]string{}
		for _, u := range p.Properties.User {
			if u.Key != mqttsink.AttrKey && u.Key != mqttsink.AttrKeyBase64 {
				headers[u.Key] = u.Value
			}
		}
		out[i] = publisherstest.Record{Topic: p.Topic, Key: key, Value: p.Payload, Headers: headers, EventID: headers[outbox.HeaderEventID]}
	}
	return out
}
