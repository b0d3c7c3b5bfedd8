package mqttsink_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	mqttsink "github.com/outboxrelay/outboxrelay/publishers/mqtt"
)

// benchMessages are one batch: 100 messages of 200 bytes over 10 keys.
func benchMessages(topic string) []outbox.Message {
	msgs := make([]outbox.Message, 100)
	for i := range msgs {
		msgs[i] = outbox.Message{ID: uuid.New(), Topic: topic, Key: fmt.Appendf(nil, "key-%d", i%10),
			Payload: make([]byte, 200), Headers: map[string]string{"content-type": "application/json"}}
	}
	return msgs
}

// BenchmarkPublish measures the sink: one Publish of a batch per
// iteration, QoS 1, to a private Mosquitto. Compare with
// BenchmarkBareClient.
func BenchmarkPublish(b *testing.B) {
	addr := broker(b)
	p, err := mqttsink.New(mqttsink.Config{URL: "mqtt://" + addr})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	msgs := benchMessages("bench/sink")
	b.ResetTimer()
	for range b.N {
		if err := p.Publish(context.Background(), msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkBareClient is the ceiling: paho alone publishing the same batch
// at QoS 1 as the sink does, each key's messages one after the other and
// the keys in parallel, with the same user properties.
func BenchmarkBareClient(b *testing.B) {
	addr := broker(b)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: packets.NewThreadSafeConn(nc)})
	if _, err := c.Connect(context.Background(), &paho.Connect{ClientID: "bench-bare", CleanStart: true, KeepAlive: 30}); err != nil {
		b.Fatal(err)
	}
	defer c.Disconnect(&paho.Disconnect{})
	msgs := benchMessages("bench/bare")
	byKey := map[string][]outbox.Message{}
	for _, m := range msgs {
		byKey[string(m.Key)] = append(byKey[string(m.Key)], m)
	}
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		for _, run := range byKey {
			wg.Go(func() {
				for _, m := range run {
					props := &paho.PublishProperties{ContentType: "application/json"}
					props.User.Add("content-type", "application/json")
					props.User.Add(outbox.HeaderEventID, m.ID.String())
					props.User.Add(mqttsink.AttrKey, string(m.Key))
					if _, err := c.Publish(context.Background(), &paho.Publish{QoS: 1, Topic: m.Topic, Payload: m.Payload, Properties: props}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
}
