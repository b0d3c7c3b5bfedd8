package publisherstest

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/publishers"
)

// Harness is what a sink's test gives Run. New, Topic and Read are
// required; each hook a declared feature needs is required too.
type Harness struct {
	// Name names the sink in messages ("kafka").
	Name string
	// Features declare what the sink promises.
	Features Features

	// New returns a fresh publisher connected to the broker under test. Run
	// calls it once per subtest, from parallel subtests, and closes the
	// publisher itself (Close may then be called once more by a cleanup the
	// harness registers).
	New func(t *testing.T) publishers.Publisher
	// Topic returns a fresh destination that accepts messages (a created
	// Kafka topic), used by one subtest only.
	Topic func(t *testing.T) string
	// Read returns every record that arrived at topic so far: the records of
	// each Stream in their arrival order. Run calls it right after Publish
	// returned, with nothing waited for in between.
	Read func(t *testing.T, topic string) []Record

	// RejectingTopic returns a destination the sink refuses every message
	// for, permanently (a Kafka topic that does not exist on a broker that
	// does not create topics). Required with Features.PerMessageErrors.
	RejectingTopic func(t *testing.T) string

	// Cut makes the broker unreachable: open connections are reset and new
	// ones refused until Heal. Required with Features.Outage.
	Cut func()
	// Stall makes the broker silent: connections stay open but nothing is
	// answered until Heal. Required with Features.Stall.
	Stall func()
	// Heal undoes Cut and Stall. Required with Features.Outage or
	// Features.Stall.
	Heal func()
}

// Features declare what a sink promises. A false field (or zero
// MaxMessageBytes) skips the subtests that check it, saying so.
type Features struct {
	// DurableAcks: Publish returns nil only once the broker has stored the
	// messages, so that an independent reader finds them at once (Kafka,
	// with acks=all). A sink whose acknowledgement is a local write (stdout)
	// lacks it.
	DurableAcks bool
	// KeyOrder: the messages of one key in one Publish call arrive in their
	// order in the call (in one Record.Stream).
	KeyOrder bool
	// KeyBatches: the publisher implements publishers.KeyBatcher and answers
	// true: once one of a key's messages in a call fails other than
	// permanently, none of the key's later messages in the call is sent, so
	// the relay may publish a key's whole run in one call. Checked by
	// cutting the broker off during a batch of several keys' runs (needs
	// Outage), and the answer must match the declaration.
	KeyBatches bool
	// PerMessageErrors: the sink can refuse one message of a batch and take
	// the others, and says which one with a publishers.Errors. Needs
	// Harness.RejectingTopic.
	PerMessageErrors bool
	// MaxMessageBytes is the largest payload the sink is configured to take;
	// a message with a larger payload must fail permanently, alone. Zero:
	// the sink has no limit.
	MaxMessageBytes int
	// Prober: the publisher implements publishers.Prober.
	Prober bool
	// Outage: the broker can be cut off and brought back (Harness.Cut and
	// Heal); while it is cut, Publish reports every message unavailable.
	Outage bool
	// Stall: the broker can be made silent (Harness.Stall and Heal), and
	// Publish and Close then honour their context and bound. A sink that
	// writes to a plain io.Writer cannot interrupt a blocked write and
	// lacks it.
	Stall bool
}

// Record is one message as it arrived at the broker.
type Record struct {
	// Topic is the destination the record arrived at.
	Topic string
	// Stream names the ordered stream that holds the record (a Kafka
	// partition); Read returns each stream's records in arrival order.
	Stream string
	// Key is the record's key, nil when it has none.
	Key []byte
	// Value is the payload.
	Value []byte
	// Headers are the record's headers. The event id header
	// (outbox.HeaderEventID), when the sink carries the id in a header, may
	// be among them; it must then equal EventID.
	Headers map[string]string
	// EventID is the event id as a consumer sees it, in canonical UUID
	// form ("" when the record carries none).
	EventID string
}
