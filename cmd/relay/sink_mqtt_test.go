package main

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/outboxrelay/outboxrelay/internal/emulators"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	mqttsink "github.com/outboxrelay/outboxrelay/publishers/mqtt"
)

// relay run --sink mqtt publishes every committed event, and none rolled
// back, to the MQTT topic of its topic on a private Mosquitto, with its
// id, key, payload and headers as user properties and, for an
// --ordered-topics topic, each key's events in the order they were
// written, read back by a paho subscriber; the password is never logged.
func TestRunWithMQTTSink(t *testing.T) {
	t.Parallel()
	broker, err := emulators.Mosquitto()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	pool, table := testdb.New(t)
	ctx := context.Background()
	topics := []string{"e2e.orders", "e2e.payments"}

	var mu sync.Mutex
	var arrived []*paho.Publish
	nc, err := net.Dial("tcp", strings.TrimPrefix(broker.Endpoint, "mqtt://"))
	if err != nil {
		t.Fatal(err)
	}
	sub := paho.NewClient(paho.ClientConfig{Conn: nc, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(r paho.PublishReceived) (bool, error) {
			mu.Lock()
			arrived = append(arrived, r.Packet)
			mu.Unlock()
			return true, nil
		},
	}})
	if _, err := sub.Connect(ctx, &paho.Connect{ClientID: "e2e-subscriber", CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Disconnect(&paho.Disconnect{}) })
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}

	committed, want := sinkEvents(t, pool, table, topics)

	const secret = "s3cret-mqtt-password"
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema,
		"OUTBOX_MQTT_URL": broker.Endpoint, "OUTBOX_MQTT_USERNAME": "relay", "OUTBOX_MQTT_PASSWORD": secret}
	logs := runUntilSent(t, pool, table, len(committed), env, "--sink", "mqtt", "--ordered-topics", topics[0])
	if !strings.Contains(logs, `"msg":"mqtt sink"`) || strings.Contains(logs, secret) {
		t.Errorf("the sink's configuration is not logged, or the password is:\n%s", logs)
	}

	// A marker published after every event was acknowledged arrives after
	// them: Mosquitto forwards in the order it took the messages.
	if _, err := sub.Publish(ctx, &paho.Publish{QoS: 1, Topic: "e2e.marker", Payload: []byte("end")}); err != nil {
		t.Fatal(err)
	}
	var got []*paho.Publish
	for deadline := time.Now().Add(30 * time.Second); ; {
		mu.Lock()
		got = slices.Clone(arrived)
		mu.Unlock()
		if len(got) > 0 && got[len(got)-1].Topic == "e2e.marker" {
			got = got[:len(got)-1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the marker did not arrive; %d messages did", len(got))
		}
		time.Sleep(10 * time.Millisecond) // poll the subscriber's list
	}
	order := map[string][]string{}
	for _, p := range got {
		id := p.Properties.User.Get(outbox.HeaderEventID)
		m, ok := committed[id]
		if !ok {
			t.Errorf("event %s arrived (twice, rolled back, or never written)", id)
			continue
		}
		delete(committed, id)
		key, err := mqttsink.Key(p.Properties.User)
		if err != nil || string(key) != string(m.Key) || (key == nil) != (m.Key == nil) || string(p.Payload) != string(m.Payload) ||
			p.Topic != m.Topic || p.Properties.User.Get("seq") != m.Headers["seq"] || p.Properties.ContentType != "application/json" {
			t.Errorf("event %s arrived as topic %s, key %q (%v), payload %q, properties %+v; written as %+v", id, p.Topic, key, err, p.Payload, p.Properties, m)
		}
		if p.Topic == topics[0] && key != nil {
			order[string(key)] = append(order[string(key)], id)
		}
	}
	for id := range committed {
		t.Errorf("committed event %s did not arrive", id)
	}
	for key, ids := range want {
		if !slices.Equal(order[key], ids) {
			t.Errorf("ordered topic, key %q: arrived in the order %v, written in the order %v", key, order[key], ids)
		}
	}
}

// Every bad --mqtt-* flag is reported, all at once, each naming its flag.
func TestMQTTSinkBadFlags(t *testing.T) {
	t.Parallel()
	code, _, stderr := invoke(context.Background(), map[string]string{"OUTBOX_MQTT_PASSWORD": "hidden"},
		"run", "--database-url", "postgres://x@127.0.0.1/db", "--sink", "mqtt", "--mqtt-qos", "3", "--mqtt-publish-timeout", "0s")
	if code != 2 {
		t.Fatalf("exit %d, want 2: %s", code, stderr)
	}
	for _, want := range []string{"--mqtt-url", "--mqtt-qos", "--mqtt-publish-timeout", "--mqtt-password"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the error does not name %s:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "hidden") {
		t.Errorf("the password is in the error:\n%s", stderr)
	}
}
