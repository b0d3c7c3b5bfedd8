package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/relay"
)

// kafkaSink publishes to Kafka (publishers/kafka); its flags are
// --kafka-*.
func init() { register(kafkaSink) }

var kafkaSink = Sink{
	Name:        "kafka",
	CloudEvents: cloudevents.Kafka,
	Flags: func(f Flags) Settings {
		k := &kafkaFlags{}
		k.register(f)
		return k
	},
}

// check builds the kafka.Config and reports every problem of the flags,
// naming each flag, and of their combination with the relay's settings.
func (k *kafkaFlags) Check(rc relay.Config) error {
	var errs problems
	cfg, err := k.config()
	errs.add(err)
	cfg.BatchSize = rc.BatchSize // one produce request per partition can carry a whole claimed batch
	if len(rc.Ordering.Topics) > 0 && cfg.Partitioner == kafka.PartitionerRoundRobin {
		errs.add(usage("--kafka-partitioner %s spreads a key over partitions, which breaks --ordered-topics; use murmur2, crc32 or fnv1a", kafka.PartitionerRoundRobin))
	}
	check := cfg
	if len(check.Brokers) == 0 { // already reported: check the rest
		check.Brokers = []string{"localhost:9092"}
	}
	for _, err := range kafkaProblems(check) {
		errs.add(kafkaUsage(err))
	}
	k.cfg = cfg
	return errs.err()
}

// open returns the Kafka publisher and logs its configuration (the SASL
// password redacted).
func (k *kafkaFlags) Open(_ relay.Config, logger *slog.Logger, _ io.Writer) (publishers.Publisher, error) {
	cfg := k.cfg
	cfg.Logger = logger
	p, err := kafka.New(cfg)
	if err != nil {
		return nil, kafkaUsage(err)
	}
	logger.Info("kafka sink", "config", p.Config())
	return p, nil
}

// kafkaFlags are the Kafka sink's flags.
type kafkaFlags struct {
	cfg kafka.Config // built by check

	batchTimeout                              time.Duration
	brokers, partitioner                      string
	tls, tlsInsecure                          bool
	tlsCA, tlsCert, tlsKey                    string
	saslMechanism, saslUsername, saslPassword string
}

func (k *kafkaFlags) register(f Flags) {
	f.String(&k.brokers, "kafka-brokers", "", "comma-separated Kafka bootstrap brokers, host:port")
	f.String(&k.partitioner, "kafka-partitioner", kafka.PartitionerMurmur2, "partition by key with murmur2 (Java client default), crc32 (librdkafka), fnv1a (sarama) or round-robin")
	f.Duration(&k.batchTimeout, "kafka-batch-timeout", kafka.DefaultBatchTimeout, "deprecated and ignored: each publish sends its produce requests at once")
	f.Bool(&k.tls, "kafka-tls", false, "connect to the brokers with TLS")
	f.String(&k.tlsCA, "kafka-tls-ca", "", "PEM file of the CA that signed the brokers' certificates (default: system roots); implies --kafka-tls")
	f.String(&k.tlsCert, "kafka-tls-cert", "", "PEM client certificate for mutual TLS; implies --kafka-tls")
	f.String(&k.tlsKey, "kafka-tls-key", "", "PEM private key of --kafka-tls-cert")
	f.Bool(&k.tlsInsecure, "kafka-tls-insecure-skip-verify", false, "do not verify the brokers' certificates (testing only)")
	f.String(&k.saslMechanism, "kafka-sasl-mechanism", "", "SASL mechanism: plain, scram-sha-256 or scram-sha-512 (default: no SASL)")
	f.String(&k.saslUsername, "kafka-sasl-username", "", "SASL user name")
	f.String(&k.saslPassword, "kafka-sasl-password", "", "SASL password (prefer the environment variable; never logged)")
}

// config turns the flags into a kafka.Config (without a logger); errors
// name the flag. kafkaProblems checks the rest.
func (k *kafkaFlags) config() (kafka.Config, error) {
	cfg := kafka.Config{
		Brokers:      splitList(k.brokers),
		Partitioner:  k.partitioner,
		BatchTimeout: k.batchTimeout,
		SASL:         kafka.SASLConfig{Mechanism: k.saslMechanism, Username: k.saslUsername, Password: k.saslPassword},
	}
	var errs problems
	if len(cfg.Brokers) == 0 {
		errs.add(usage("--kafka-brokers (%s) is required with --sink kafka", EnvName("kafka-brokers")))
	}
	if k.tls || k.tlsCA != "" || k.tlsCert != "" || k.tlsKey != "" || k.tlsInsecure {
		tlsCfg, err := kafka.LoadTLS(k.tlsCA, k.tlsCert, k.tlsKey, k.tlsInsecure)
		if err != nil {
			errs.add(usage("invalid TLS files (--kafka-tls-ca, --kafka-tls-cert, --kafka-tls-key): %v", err))
		}
		cfg.TLS = tlsCfg
	}
	return cfg, errs.err()
}

// kafkaProblems returns every error kafka.New finds in cfg, not only the
// first: each refused field is set back to its default and cfg is checked
// again. The publishers it builds on the way are closed; none connects.
func kafkaProblems(cfg kafka.Config) []error {
	var out []error
	seen := map[string]bool{}
	for {
		p, err := kafka.New(cfg)
		if err == nil {
			_ = p.Close()
			return out
		}
		var ce *kafka.ConfigError
		if !errors.As(err, &ce) || seen[ce.Field] {
			return append(out, err)
		}
		out, seen[ce.Field] = append(out, err), true
		switch {
		case ce.Field == "Brokers":
			cfg.Brokers = []string{"localhost:9092"}
		case strings.HasPrefix(ce.Field, "SASL"):
			cfg.SASL = kafka.SASLConfig{}
		case !ZeroField(&cfg, ce.Field):
			return out
		}
	}
}

// kafkaConfigFlag maps kafka.Config fields to the flags that set them.
var kafkaConfigFlag = map[string]string{
	"Brokers": "kafka-brokers", "Partitioner": "kafka-partitioner",
	"SASL.Mechanism": "kafka-sasl-mechanism", "SASL.Username": "kafka-sasl-username", "BatchTimeout": "kafka-batch-timeout",
}

// kafkaUsage turns an error of kafka.New into a usage error naming the flag.
func kafkaUsage(err error) error {
	var ce *kafka.ConfigError
	switch {
	case !errors.As(err, &ce):
	case kafkaConfigFlag[ce.Field] != "":
		name := kafkaConfigFlag[ce.Field]
		return invalid(name, ce.Reason)
	case ce.Field == "SASL":
		return usage("invalid value for --kafka-sasl-username (%s) or --kafka-sasl-password (%s): %s",
			EnvName("kafka-sasl-username"), EnvName("kafka-sasl-password"), ce.Reason)
	}
	return usage("invalid Kafka configuration: %v", err)
}

// kafkaReader reads Kafka back with kafka-go, one reader per partition,
// from the brokers given or an embedded kfake broker.
type kafkaReader struct {
	brokers []string
	stop    func()          // the embedded broker's; nil with brokers given
	created map[string]bool // the topics Prepare created
}

// Embed starts an embedded kfake broker on 127.0.0.1 and points
// --kafka-brokers at it.
func (k *kafkaFlags) Embed() (func(), error) {
	b, err := kfakebroker.Start(kfakebroker.Options{})
	if err != nil {
		return nil, fmt.Errorf("start embedded broker: %w", err)
	}
	k.brokers = strings.Join(b.Addrs(), ",")
	return b.Close, nil
}

// Reader returns a Reader of --kafka-brokers; without brokers it embeds
// one (Embed).
func (k *kafkaFlags) Reader() (Reader, error) {
	r := &kafkaReader{created: map[string]bool{}}
	if k.brokers == "" {
		var err error
		if r.stop, err = k.Embed(); err != nil {
			return nil, err
		}
	}
	r.brokers = splitList(k.brokers)
	return r, nil
}

// admin runs fn with a client of the brokers and closes its connections
// after.
func (k *kafkaReader) admin(fn func(*kafkago.Client) error) error {
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	return fn(&kafkago.Client{Addr: kafkago.TCP(k.brokers...), Transport: tr})
}

// Prepare creates topic with 3 partitions, unless it exists.
func (k *kafkaReader) Prepare(ctx context.Context, topic string) (string, error) {
	err := k.admin(func(c *kafkago.Client) error {
		res, err := c.CreateTopics(ctx, &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{
			{Topic: topic, NumPartitions: 3, ReplicationFactor: 1},
		}})
		if err == nil {
			err = res.Errors[topic]
		}
		return err
	})
	switch {
	case err == nil:
		k.created[topic] = true
	case !errors.Is(err, kafkago.TopicAlreadyExists):
		return "", fmt.Errorf("create topic %s on %v: %w", topic, k.brokers, err)
	}
	if k.stop != nil {
		return fmt.Sprintf("kafka:    embedded kfake broker on %v, topic %s (3 partitions)", k.brokers, topic), nil
	}
	return fmt.Sprintf("kafka:    brokers %v, topic %s", k.brokers, topic), nil
}

// Read reads every partition of topic from its first offset, each with a
// reader of its own; without follow, up to the partition's end when it
// began.
func (k *kafkaReader) Read(ctx context.Context, topic string, follow bool, got func(Record), ready func()) error {
	conn, err := kafkago.DialContext(ctx, "tcp", k.brokers[0])
	if err != nil {
		return fmt.Errorf("consumer: dial %s: %w", k.brokers[0], err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return fmt.Errorf("consumer: partitions of %s: %w", topic, err)
	}
	var mu sync.Mutex // got is called from one goroutine at a time
	var wg sync.WaitGroup
	errs := make([]error, len(parts))
	for i, p := range parts {
		r := kafkago.NewReader(kafkago.ReaderConfig{
			Brokers: k.brokers, Topic: topic, Partition: p.ID,
			MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 100 * time.Millisecond,
			StartOffset: kafkago.FirstOffset,
		})
		wg.Go(func() {
			defer r.Close()
			left := int64(-1) // follow: no end
			if !follow {
				if left, errs[i] = r.ReadLag(ctx); errs[i] != nil {
					return
				}
			}
			for ; left != 0; left-- {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					if !follow {
						errs[i] = fmt.Errorf("read %s/%d: %w", topic, p.ID, err)
					}
					return // with follow, ctx ended
				}
				rec := Record{Key: string(m.Key), Payload: string(m.Value), Partition: m.Partition, Offset: m.Offset, Time: m.Time}
				for _, h := range m.Headers {
					if h.Key == outbox.HeaderEventID {
						rec.EventID = string(h.Value)
					}
				}
				mu.Lock()
				got(rec)
				mu.Unlock()
			}
		})
	}
	if ready != nil {
		ready()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Remove deletes topic if Prepare created it.
func (k *kafkaReader) Remove(ctx context.Context, topic string) error {
	if !k.created[topic] {
		return nil
	}
	delete(k.created, topic)
	return k.admin(func(c *kafkago.Client) error {
		res, err := c.DeleteTopics(ctx, &kafkago.DeleteTopicsRequest{Topics: []string{topic}})
		if err == nil {
			err = res.Errors[topic]
		}
		if err != nil {
			return fmt.Errorf("delete topic %s: %w", topic, err)
		}
		return nil
	})
}

// Close stops the embedded broker.
func (k *kafkaReader) Close() error {
	if k.stop != nil {
		k.stop()
	}
	return nil
}
