package kfakebroker_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
)

func start(t *testing.T, opts kfakebroker.Options) *kfakebroker.Broker {
	t.Helper()
	b, err := kfakebroker.Start(opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// client returns a kafka-go client for b with its own transport.
func client(t *testing.T, b *kfakebroker.Broker, transport *kafkago.Transport) *kafkago.Client {
	if transport == nil {
		transport = &kafkago.Transport{}
	}
	t.Cleanup(transport.CloseIdleConnections)
	return &kafkago.Client{Addr: kafkago.TCP(b.Addrs()...), Transport: transport, Timeout: 5 * time.Second}
}

// partitions returns the partition count of topic, or an error.
func partitions(ctx context.Context, c *kafkago.Client, topic string, autoCreate bool) (int, error) {
	res, err := c.Transport.RoundTrip(ctx, c.Addr, &metadataAPI.Request{TopicNames: []string{topic}, AllowAutoTopicCreation: autoCreate})
	if err != nil {
		return 0, err
	}
	for _, tp := range res.(*metadataAPI.Response).Topics {
		if tp.Name == topic {
			if tp.ErrorCode != 0 {
				return 0, kafkago.Error(tp.ErrorCode)
			}
			return len(tp.Partitions), nil
		}
	}
	return 0, kafkago.UnknownTopicOrPartition
}

func produce(ctx context.Context, c *kafkago.Client, topic, value string) error {
	res, err := c.Produce(ctx, &kafkago.ProduceRequest{
		Topic: topic, Partition: 0, RequiredAcks: kafkago.RequireAll,
		Records: kafkago.NewRecordReader(kafkago.Record{Value: kafkago.NewBytes([]byte(value))}),
	})
	if err != nil {
		return err
	}
	return res.Error
}

// highWatermark returns the number of records in partition 0 of topic.
func highWatermark(ctx context.Context, c *kafkago.Client, topic string) (int64, error) {
	res, err := c.ListOffsets(ctx, &kafkago.ListOffsetsRequest{
		Topics: map[string][]kafkago.OffsetRequest{topic: {kafkago.LastOffsetOf(0)}},
	})
	if err != nil {
		return 0, err
	}
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return 0, p.Error
		}
		return p.LastOffset, nil
	}
	return 0, errors.New("no offsets returned")
}

func TestStartDefaults(t *testing.T) {
	t.Parallel()
	b := start(t, kfakebroker.Options{Topics: []string{"a", "b"}})
	addrs := b.Addrs()
	if len(addrs) != 1 || !strings.HasPrefix(addrs[0], "127.0.0.1:") {
		t.Fatalf("Addrs = %v, want one loopback address", addrs)
	}
	c := client(t, b, nil)
	for _, topic := range []string{"a", "b"} {
		n, err := partitions(ctxFor(t), c, topic, false)
		if err != nil || n != kfakebroker.DefaultPartitions {
			t.Errorf("topic %s: %d partitions, %v; want %d", topic, n, err, kfakebroker.DefaultPartitions)
		}
	}
	if _, err := partitions(ctxFor(t), c, "missing", true); !errors.Is(err, kafkago.UnknownTopicOrPartition) {
		t.Errorf("missing topic without AutoCreateTopics: %v, want UnknownTopicOrPartition", err)
	}
	if err := produce(ctxFor(t), c, "a", "hello"); err != nil {
		t.Errorf("produce: %v", err)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	b := start(t, kfakebroker.Options{Brokers: 3, Partitions: 5, AutoCreateTopics: true})
	if n := len(b.Addrs()); n != 3 {
		t.Errorf("Addrs has %d entries, want 3", n)
	}
	n, err := partitions(ctxFor(t), client(t, b, nil), "created-on-demand", true)
	if err != nil || n != 5 {
		t.Errorf("auto-created topic: %d partitions, %v; want 5", n, err)
	}

	for name, opts := range map[string]kfakebroker.Options{
		"negative port":        {Port: -1},
		"port too large":       {Port: 70000},
		"fixed port, 2 nodes":  {Port: 40000, Brokers: 2},
		"negative partitions":  {Partitions: -1},
		"unknown mechanism":    {Users: []kfakebroker.User{{Mechanism: "GSSAPI", Name: "u"}}},
		"user without name":    {Users: []kfakebroker.User{{Password: "p"}}},
		"TLS without cert":     {TLS: &tls.Config{}},
		"negative max message": {MaxMessageBytes: -1},
	} {
		if b, err := kfakebroker.Start(opts); err == nil {
			b.Close()
			t.Errorf("%s: Start succeeded", name)
		}
	}
}

func TestPortInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if b, err := kfakebroker.Start(kfakebroker.Options{Port: port}); err == nil {
		b.Close()
		t.Fatal("Start on a port in use succeeded")
	} else if !strings.Contains(err.Error(), l.Addr().String()) {
		t.Errorf("error %q should name the address", err)
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A broker closed and started again on the same port is reachable at the
// same address; its records survive only with a DataDir.
func TestRestartOnSamePort(t *testing.T) {
	t.Parallel()
	for _, persist := range []bool{false, true} {
		name := "in-memory"
		if persist {
			name = "data-dir"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			opts := kfakebroker.Options{Port: freePort(t), Topics: []string{"t"}}
			if persist {
				opts.DataDir = t.TempDir()
			}
			b := start(t, opts)
			addr := b.Addrs()[0]
			if err := produce(ctxFor(t), client(t, b, nil), "t", "before restart"); err != nil {
				t.Fatalf("produce: %v", err)
			}
			b.Close()
			b.Close() // idempotent
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				t.Fatal("closed broker still accepts connections")
			}

			b2 := start(t, opts)
			if got := b2.Addrs()[0]; got != addr {
				t.Fatalf("restarted on %s, want %s", got, addr)
			}
			hw, err := highWatermark(ctxFor(t), client(t, b2, nil), "t")
			if err != nil {
				t.Fatalf("offsets after restart: %v", err)
			}
			want := int64(0)
			if persist {
				want = 1
			}
			if hw != want {
				t.Errorf("%d records after restart, want %d", hw, want)
			}
		})
	}
}

func TestSASLUsers(t *testing.T) {
	t.Parallel()
	b := start(t, kfakebroker.Options{
		Topics: []string{"t"},
		Users:  []kfakebroker.User{{Name: "alice", Password: "wonderland"}}, // PLAIN by default
	})
	ok := client(t, b, &kafkago.Transport{SASL: plain.Mechanism{Username: "alice", Password: "wonderland"}})
	if err := produce(ctxFor(t), ok, "t", "x"); err != nil {
		t.Errorf("authenticated produce: %v", err)
	}
	for name, transport := range map[string]*kafkago.Transport{
		"no SASL":        {DialTimeout: time.Second},
		"wrong password": {DialTimeout: time.Second, SASL: plain.Mechanism{Username: "alice", Password: "nope"}},
	} {
		if err := produce(ctxFor(t), client(t, b, transport), "t", "x"); err == nil {
			t.Errorf("%s: produce succeeded", name)
		}
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	files, err := kfakebroker.GenerateTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := start(t, kfakebroker.Options{Topics: []string{"t"}, TLS: files.Server})
	pem, err := os.ReadFile(files.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("CA file holds no certificate")
	}
	good := client(t, b, &kafkago.Transport{TLS: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}})
	if err := produce(ctxFor(t), good, "t", "x"); err != nil {
		t.Errorf("produce over TLS: %v", err)
	}
	untrusted := client(t, b, &kafkago.Transport{DialTimeout: time.Second, TLS: &tls.Config{MinVersion: tls.VersionTLS12}})
	if err := produce(ctxFor(t), untrusted, "t", "x"); err == nil {
		t.Error("produce trusting only the system roots succeeded")
	}
}

func TestClusterControl(t *testing.T) {
	t.Parallel()
	b := start(t, kfakebroker.Options{Topics: []string{"t"}})
	var seen atomic.Int32
	b.Cluster().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		seen.Add(1)
		return nil, nil, false // observe only
	})
	if err := produce(ctxFor(t), client(t, b, nil), "t", "x"); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if seen.Load() != 1 {
		t.Errorf("control function saw %d produce requests, want 1", seen.Load())
	}
}

func TestMaxMessageBytes(t *testing.T) {
	t.Parallel()
	b := start(t, kfakebroker.Options{Topics: []string{"t"}, MaxMessageBytes: 1000})
	c := client(t, b, nil)
	if err := produce(ctxFor(t), c, "t", strings.Repeat("x", 2000)); !errors.Is(err, kafkago.MessageSizeTooLarge) {
		t.Errorf("produce over message.max.bytes: %v, want MessageSizeTooLarge", err)
	}
	if err := produce(ctxFor(t), c, "t", "small"); err != nil {
		t.Errorf("small produce: %v", err)
	}
}
