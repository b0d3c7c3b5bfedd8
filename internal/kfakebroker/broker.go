package kfakebroker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SASL mechanisms accepted in User.Mechanism.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

// DefaultPartitions is the partition count of pre-created and auto-created
// topics when Options.Partitions is zero.
const DefaultPartitions = 3

// Options configures Start. The zero value starts one broker on a free
// loopback port, with no topics, no authentication and no TLS.
type Options struct {
	// Port is the TCP port the broker listens on at 127.0.0.1. A fixed port
	// lets a test close the broker and start a new one at the same address,
	// which clients then reconnect to. Defaults to 0: any free port.
	Port int
	// Brokers is the number of brokers in the cluster, each on its own port.
	// A fixed Port allows only one broker. Defaults to 1.
	Brokers int
	// Partitions is the partition count of the topics in Topics and of
	// auto-created topics. Defaults to DefaultPartitions (3).
	Partitions int
	// Topics are created when the broker starts.
	Topics []string
	// AutoCreateTopics lets a metadata request that asks for it create a
	// missing topic, like a broker with auto.create.topics.enable=true.
	// Clients must ask too (kafka-go: Writer.AllowAutoTopicCreation).
	// Defaults to false: a missing topic is reported as unknown.
	AutoCreateTopics bool
	// Users enables SASL authentication when non-empty: every client must
	// authenticate as one of these users first. Defaults to none: no
	// authentication.
	Users []User
	// TLS, when non-nil, makes the broker accept only TLS connections,
	// using this server configuration (it needs at least one certificate).
	// Defaults to nil: plaintext.
	TLS *tls.Config
	// DataDir, when set, persists the cluster's topics and records in this
	// directory, so that a broker started again with the same DataDir (and
	// Port) keeps them. Defaults to "": state is in memory and lost on Close.
	DataDir string
	// MaxMessageBytes is the broker's message.max.bytes, the largest record
	// batch it accepts. Defaults to 0: kfake's default of 1048588, like
	// Apache Kafka's.
	MaxMessageBytes int
	// Listen, when set, replaces net.Listen for the brokers' listeners. The
	// brokers advertise each listener's Addr() to clients, so a listener
	// that reports another address (a fault proxy in front of it, say)
	// routes every client connection through that address. Defaults to
	// nil: net.Listen.
	Listen func(network, address string) (net.Listener, error)
}

// User is a SASL identity the broker accepts.
type User struct {
	// Mechanism is MechanismPlain, MechanismScramSHA256 or
	// MechanismScramSHA512. Defaults to MechanismPlain.
	Mechanism string
	// Name is the user name.
	Name string
	// Password is the user's password.
	Password string
}

// Broker is a running kfake cluster. Its methods are safe for concurrent use.
type Broker struct {
	cluster   *kfake.Cluster
	addrs     []string
	closeOnce sync.Once
}

// Start starts a cluster as described by opts and returns once it accepts
// connections. The caller must Close it.
func Start(opts Options) (*Broker, error) {
	kopts, err := opts.kfakeOpts()
	if err != nil {
		return nil, err
	}
	cluster, err := kfake.NewCluster(kopts...)
	if err != nil {
		if opts.Port != 0 {
			return nil, fmt.Errorf("kfakebroker: start on 127.0.0.1:%d: %w", opts.Port, err)
		}
		return nil, fmt.Errorf("kfakebroker: start: %w", err)
	}
	return &Broker{cluster: cluster, addrs: cluster.ListenAddrs()}, nil
}

// kfakeOpts validates opts and translates them to kfake options.
func (o Options) kfakeOpts() ([]kfake.Opt, error) {
	if o.Port < 0 || o.Port > 65535 {
		return nil, fmt.Errorf("kfakebroker: Port %d is outside 0-65535", o.Port)
	}
	brokers := o.Brokers
	switch {
	case brokers < 0:
		return nil, fmt.Errorf("kfakebroker: Brokers %d is negative", brokers)
	case brokers == 0:
		brokers = 1
	case brokers > 1 && o.Port != 0:
		return nil, errors.New("kfakebroker: a fixed Port allows only one broker")
	}
	partitions := o.Partitions
	if partitions < 0 {
		return nil, fmt.Errorf("kfakebroker: Partitions %d is negative", partitions)
	}
	if partitions == 0 {
		partitions = DefaultPartitions
	}
	if o.MaxMessageBytes < 0 {
		return nil, fmt.Errorf("kfakebroker: MaxMessageBytes %d is negative", o.MaxMessageBytes)
	}

	opts := []kfake.Opt{
		kfake.DefaultNumPartitions(partitions),
		kfake.ClusterID("outboxrelay-kfake"),
	}
	if o.Port != 0 {
		opts = append(opts, kfake.Ports(o.Port))
	} else {
		opts = append(opts, kfake.NumBrokers(brokers))
	}
	if len(o.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(partitions), o.Topics...))
	}
	if o.AutoCreateTopics {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if len(o.Users) > 0 {
		opts = append(opts, kfake.EnableSASL())
		for i, u := range o.Users {
			mech := u.Mechanism
			if mech == "" {
				mech = MechanismPlain
			}
			switch mech {
			case MechanismPlain, MechanismScramSHA256, MechanismScramSHA512:
			default:
				return nil, fmt.Errorf("kfakebroker: Users[%d]: unknown SASL mechanism %q", i, u.Mechanism)
			}
			if u.Name == "" {
				return nil, fmt.Errorf("kfakebroker: Users[%d]: empty Name", i)
			}
			opts = append(opts, kfake.Superuser(mech, u.Name, u.Password))
		}
	}
	if o.TLS != nil {
		if len(o.TLS.Certificates) == 0 && o.TLS.GetCertificate == nil {
			return nil, errors.New("kfakebroker: TLS config has no certificate")
		}
		opts = append(opts, kfake.TLS(o.TLS))
	}
	if o.DataDir != "" {
		opts = append(opts, kfake.DataDir(o.DataDir))
	}
	if o.Listen != nil {
		opts = append(opts, kfake.ListenFn(o.Listen))
	}
	if o.MaxMessageBytes > 0 {
		opts = append(opts, kfake.BrokerConfigs(map[string]string{
			"message.max.bytes": fmt.Sprint(o.MaxMessageBytes),
		}))
	}
	return opts, nil
}

// Addrs returns the "127.0.0.1:port" address of every broker, in node order.
// Any one of them is enough to bootstrap a client.
func (b *Broker) Addrs() []string {
	return append([]string(nil), b.addrs...)
}

// Cluster returns the underlying kfake cluster, for tests that intercept
// requests (ControlKey), move partitions or add and remove brokers.
func (b *Broker) Cluster() *kfake.Cluster {
	return b.cluster
}

// Close stops the cluster: it closes the listeners and every client
// connection, so clients see their connections drop and new dials refused.
// With a DataDir it first writes the state to disk. Close is idempotent.
func (b *Broker) Close() {
	b.closeOnce.Do(b.cluster.Close)
}

// ProduceErrorResponse answers every partition of req with the error code:
// what a ControlKey function on kmsg.Produce returns to make the broker
// refuse a produce request, e.g. with kerr.NotEnoughReplicas.Code.
func ProduceErrorResponse(req *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
