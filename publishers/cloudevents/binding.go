package cloudevents

import (
	"fmt"
	"strings"
)

// Mode is how events travel as CloudEvents.
type Mode string

// The modes. The zero Mode sends events as they are.
const (
	// ModeOff sends events as they are, not as CloudEvents: what a route
	// uses to opt out of relay run's --cloudevents.
	ModeOff Mode = "off"
	// ModeBinary sends the payload as it is, the attributes as headers.
	ModeBinary Mode = "binary"
	// ModeStructured sends the JSON event format's envelope as payload.
	ModeStructured Mode = "structured"
)

// ParseMode parses "binary", "structured" or "off" ("" is off).
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "", ModeOff, ModeBinary, ModeStructured:
		return m, nil
	}
	return "", fmt.Errorf("%q is not a CloudEvents mode: binary, structured or off", s)
}

// On reports whether m converts events.
func (m Mode) On() bool { return m == ModeBinary || m == ModeStructured }

// Binding is how one protocol carries CloudEvents attributes in binary
// mode. Every binding carries datacontenttype in the message header
// HeaderContentType, which the sink maps to its protocol's content type
// where it has one (HTTP Content-Type, the AMQP content-type property,
// MQTT 5's Content Type).
type Binding struct {
	// Name names the binding in errors: "Kafka", "HTTP".
	Name string
	// Prefix starts the header of each attribute: ce_ for ce_id on Kafka.
	Prefix string
	// PercentEncode is set for HTTP, whose binding (3.1.3.2) has the
	// attribute headers' values percent-encoded: space, '"', '%' and every
	// byte outside printable ASCII.
	PercentEncode bool
	// NoBinary is set for a protocol that cannot carry binary mode (no
	// headers, or too few); it then takes structured mode only.
	NoBinary bool
	// Why says why there is no binary mode.
	Why string
}

// The bindings of the sinks. Where CloudEvents defines no binding for a
// protocol, the choice is the one closest to a binding it defines.
var (
	// Kafka follows the Kafka protocol binding 1.0: ce_ headers.
	Kafka = Binding{Name: "Kafka", Prefix: "ce_"}
	// HTTP follows the HTTP protocol binding 1.0: ce- headers and
	// Content-Type (the webhook sink).
	HTTP = Binding{Name: "HTTP", Prefix: "ce-", PercentEncode: true}
	// NATS follows the NATS protocol binding 1.0.1: ce- headers.
	NATS = Binding{Name: "NATS", Prefix: "ce-"}
	// AMQP follows the AMQP protocol binding 1.0 on AMQP 0-9-1 (RabbitMQ):
	// its application properties are the headers table, cloudEvents_
	// names; its content-type property is basic.properties' content_type.
	AMQP = Binding{Name: "AMQP", Prefix: "cloudEvents_"}
	// RedisStreams has no CloudEvents binding: the attributes go in the
	// entry's headers field as ce_ names, as on Kafka, another log of
	// records whose headers are a map.
	RedisStreams = Binding{Name: "Redis streams", Prefix: "ce_"}
	// MQTT follows the MQTT protocol binding 1.0 for MQTT 5: user
	// properties named as the attributes, no prefix (an event header of
	// an attribute's name gives way to the attribute).
	MQTT = Binding{Name: "MQTT", Prefix: ""}
	// PubSub follows the Google Cloud Pub/Sub binding: ce- attributes.
	PubSub = Binding{Name: "Pub/Sub", Prefix: "ce-"}
	// SQS has no binding, and an SQS message carries at most 10 message
	// attributes: structured mode only.
	SQS = Binding{Name: "SQS", NoBinary: true, Why: "an SQS message carries at most 10 message attributes, and CloudEvents defines no SQS binding"}
	// SNS: as SQS.
	SNS = Binding{Name: "SNS", NoBinary: true, Why: "an SNS message carries at most 10 message attributes, and CloudEvents defines no SNS binding"}
	// Kinesis records have no headers: structured mode only.
	Kinesis = Binding{Name: "Kinesis", NoBinary: true, Why: "a Kinesis record has no headers"}
	// Stdout shows the binary attributes as ce- headers, as HTTP does.
	Stdout = Binding{Name: "stdout", Prefix: "ce-"}
)

// Check reports whether b can carry events in mode m.
func (b Binding) Check(m Mode) error {
	if m == ModeBinary && b.NoBinary {
		return fmt.Errorf("%s cannot carry CloudEvents in binary mode (%s); use structured", b.Name, b.Why)
	}
	if m.On() && b.Name == "" {
		return fmt.Errorf("this sink has no CloudEvents binding")
	}
	return nil
}

// Config is how Convert and Wrap turn events into CloudEvents.
type Config struct {
	// Mode is the content mode; off when not On.
	Mode Mode
	// Binding is the sink's.
	Binding Binding
	// Source is the source attribute. Defaults to DefaultSource.
	Source string
}

// DefaultSource is the default Config.Source: the same for every relay
// of a deployment, so that source and id identify an event however many
// replicas send it.
const DefaultSource = "/outboxrelay"

// Check reports a configuration Convert cannot use.
func (c Config) Check() error {
	if err := c.Binding.Check(c.Mode); err != nil {
		return err
	}
	if strings.TrimSpace(c.Source) != c.Source || strings.ContainsAny(c.Source, " \t\r\n") {
		return fmt.Errorf("source %q holds white space: it must be a URI reference such as /orders-service", c.Source)
	}
	return nil
}

func (c Config) source() string {
	if c.Source == "" {
		return DefaultSource
	}
	return c.Source
}
