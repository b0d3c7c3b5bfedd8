package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/history"
	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
)

// kafkaSink is the default sink: a kfake broker that advertises its fault
// proxy's address, read back with kafka-go. Its topics are fixed: the
// broker is the run's own.
type kafkaSink struct {
	seed   uint64
	broker *kfakebroker.Broker
	proxy  *faultproxy.Proxy
	// refuseProduce, when set, is the share of produce requests the
	// broker refuses with retriable errors (broker-errors).
	refuseProduce atomic.Pointer[float64]
	produceRng    *rand.Rand // guarded by produceMu
	produceMu     sync.Mutex
	refusedN      atomic.Int64
}

func (k *kafkaSink) topics() (string, string) { return orderedTopic, plainTopic }
func (k *kafkaSink) kinds() []string          { return allKinds }
func (k *kafkaSink) where() string            { return fmt.Sprint(k.broker.Addrs()) }
func (k *kafkaSink) refuse(share *float64)    { k.refuseProduce.Store(share) }
func (k *kafkaSink) refused() int64           { return k.refusedN.Load() }

func (k *kafkaSink) relayArgs() (args, env []string) {
	return nil, []string{"OUTBOX_KAFKA_BROKERS=" + strings.Join(k.broker.Addrs(), ",")}
}

func (k *kafkaSink) start(_ context.Context, t *testing.T) *faultproxy.Proxy {
	k.produceRng = rand.New(rand.NewPCG(k.seed, 7))
	// The broker advertises the proxy's address, so every client
	// connection, including those metadata leads to, goes through it.
	var err error
	k.broker, err = kfakebroker.Start(kfakebroker.Options{
		Topics: []string{orderedTopic, plainTopic},
		Listen: func(network, address string) (net.Listener, error) {
			ln, err := faultproxy.Listen(network, address)
			if err != nil {
				return nil, err
			}
			k.proxy = ln.Proxy
			return ln, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.broker.Close()
		k.proxy.Close()
	})
	k.broker.Cluster().ControlKey(int16(kmsg.Produce), k.produceControl)
	return k.proxy
}

// produceControl refuses a share of produce requests during broker-errors.
func (k *kafkaSink) produceControl(req kmsg.Request) (kmsg.Response, error, bool) {
	k.broker.Cluster().KeepControl()
	share := k.refuseProduce.Load()
	if share == nil {
		return nil, nil, false
	}
	k.produceMu.Lock()
	refuse := k.produceRng.Float64() < *share
	k.produceMu.Unlock()
	if !refuse {
		return nil, nil, false
	}
	k.refusedN.Add(1)
	return kfakebroker.ProduceErrorResponse(req.(*kmsg.ProduceRequest), kerr.NotLeaderForPartition.Code), nil, true
}

// read reads both topics back from offset 0; a record's time is its
// timestamp, set by the producing relay.
func (k *kafkaSink) read(_ context.Context, t *testing.T) []record {
	var deliveries []record
	for _, topic := range []string{orderedTopic, plainTopic} {
		for _, r := range kafkatest.ReadTopic(t, k.broker.Addrs(), topic, nil) {
			deliveries = append(deliveries, record{history.Delivery{EventID: r.EventID(), Topic: topic, Key: string(r.Key),
				Partition: r.Partition, Offset: r.Offset, Time: r.Time}, string(r.Value)})
		}
	}
	return deliveries
}
