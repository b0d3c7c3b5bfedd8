package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// seqPublisher fails each message of a sequence number below 3 once,
// transiently, and keeps, per topic and key, the sequence numbers of the
// messages it took, in the order it took them. Payloads are
// "<key>:<seq>". It takes one event of a key per call (no KeyBatches), so
// that a failed event holds the key's later ones back only if the relay
// does.
type seqPublisher struct {
	mu     sync.Mutex
	failed map[string]bool  // by id
	took   map[string][]int // by "topic/key"
}

func (p *seqPublisher) Publish(_ context.Context, msgs []outbox.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := make(publishers.Errors, len(msgs))
	failed := false
	for i, m := range msgs {
		var key string
		var seq int
		if _, err := fmt.Sscanf(strings.Replace(string(m.Payload), ":", " ", 1), "%s %d", &key, &seq); err != nil {
			return publishers.Permanent(err)
		}
		if id := m.ID.String(); seq < 3 && !p.failed[id] {
			p.failed[id], errs[i], failed = true, errors.New("flaky"), true
			continue
		}
		p.took[m.Topic+"/"+key] = append(p.took[m.Topic+"/"+key], seq)
	}
	if failed {
		return errs
	}
	return nil
}

func (p *seqPublisher) Close() error { return nil }

// Keyed rows of the topics an ordered pattern matches are the ordered
// loops': each topic's events of a key reach the sink in write order,
// though the sink fails the first of them once; no unordered claim takes
// one of them. Keyed rows of the other topics, among them one that a
// pattern's _ would match if it stood for any character, are the
// unordered claims'.
func TestOrderedPatternsTakeTheirTopicsKeyedRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, table := testdb.New(t)
	pub := &seqPublisher{failed: map[string]bool{}, took: map[string][]int{}}
	var seen events
	r := quietRelay(t, pool, pub, Config{
		Table: table, ID: "patterns", PollInterval: 10 * time.Millisecond,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Ordering: Ordering{Topics: []string{"orders.*", "pay_in"}, Shards: 4},
		Observer: &seen,
	})
	ordered := []string{"orders.created", "orders.paid", "pay_in"}
	unordered := []string{"payXin", "orders", "audit.orders.x"}
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	const keys, perKey = 20, 9 // 3 events of each topic per key
	for seq := range perKey {  // one transaction per sequence number
		var msgs []outbox.Message
		for k := range keys {
			key := fmt.Sprintf("k%02d", k)
			msgs = append(msgs,
				outbox.Message{Topic: ordered[seq%3], Key: []byte(key), Payload: fmt.Appendf(nil, "%s:%d", key, seq)},
				outbox.Message{Topic: unordered[seq%3], Key: []byte(key), Payload: fmt.Appendf(nil, "u-%s:%d", key, seq)})
		}
		if _, err := w.WriteBatch(ctx, pool, msgs); err != nil {
			t.Fatal(err)
		}
	}
	runInBackground(t, r)
	testdb.AwaitSent(t, pool, table, 2*keys*perKey, time.Minute)

	pub.mu.Lock()
	defer pub.mu.Unlock()
	for i, topic := range ordered {
		want := []int{i, i + 3, i + 6}
		for k := range keys {
			if stream := fmt.Sprintf("%s/k%02d", topic, k); !slices.Equal(pub.took[stream], want) {
				t.Errorf("%s: the sink took %v, want %v", stream, pub.took[stream], want)
			}
		}
	}
	claimed := map[bool]map[string]int{true: {}, false: {}} // by ordered claim or not, by topic
	for _, e := range seen.of(EventClaimed) {
		for _, tc := range e.Topics {
			claimed[e.Claim == ClaimOrdered][tc.Topic] += tc.Claimed
		}
	}
	for _, topic := range ordered {
		if claimed[false][topic] != 0 || claimed[true][topic] < keys*perKey/3 {
			t.Errorf("topic %s: %d rows claimed ordered, %d unordered; want %d or more, none", topic, claimed[true][topic], claimed[false][topic], keys*perKey/3)
		}
	}
	for _, topic := range unordered {
		if claimed[true][topic] != 0 || claimed[false][topic] < keys*perKey/3 {
			t.Errorf("topic %s: %d rows claimed ordered, %d unordered; want none, %d or more", topic, claimed[true][topic], claimed[false][topic], keys*perKey/3)
		}
	}
}

// Ordering.Topics takes the patterns a route does: each * stands for any
// run of characters (the invalid ones are in TestConfigValidate).
func TestOrderingTopicsTakePatterns(t *testing.T) {
	for _, topics := range [][]string{{"orders.*"}, {"*.created", "pay_in"}, {"*"}, {"a*b*c", "**"}} {
		if err := (Config{Ordering: Ordering{Topics: topics}}).Validate(); err != nil {
			t.Errorf("Ordering.Topics %q: %v; want them taken", topics, err)
		}
	}
}
