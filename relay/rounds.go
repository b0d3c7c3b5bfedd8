package relay

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// rounds hands out a batch's messages round by round: all of them at once,
// or, when ordered, one per key per round, in write order. An ordered batch
// for a sink that takes a key's events together (publishers.KeyBatcher) is
// one round in write order, and keyed.
type rounds struct {
	all    []outbox.Message            // unordered, or keyed: the one round
	keyed  bool                        // all is ordered: see heads
	queues map[string][]outbox.Message // ordered: per topic and key, in write order
	keys   []string                    // ordered: in order of first appearance
}

// roundKey is a message's key for ordering: its topic and key.
func roundKey(m outbox.Message) string { return m.Topic + "\x00" + string(m.Key) }

// next returns the next round's messages, and counts them as attempted.
func (q *rounds) next() []outbox.Message {
	if q.queues == nil {
		all := q.all
		q.all = nil
		return all
	}
	var msgs []outbox.Message
	for _, k := range q.keys {
		if queue := q.queues[k]; len(queue) > 0 {
			msgs = append(msgs, queue[0])
			q.queues[k] = queue[1:]
		}
	}
	return msgs
}

// drop removes the events queued behind m's key and returns their ids.
func (q *rounds) drop(m outbox.Message) []uuid.UUID {
	if q.queues == nil {
		return nil
	}
	k := roundKey(m)
	ids := idsOf(q.queues[k])
	q.queues[k] = nil
	return ids
}

// rest returns the ids of the messages not attempted, counting them as
// released in t.
func (q *rounds) rest(t *topicTally) []uuid.UUID {
	ids := idsOf(q.all)
	for _, m := range q.all {
		t.add(m.Topic, tallyReleased, 1)
	}
	for _, k := range q.keys {
		queue := q.queues[k]
		ids = append(ids, idsOf(queue)...)
		if len(queue) > 0 {
			t.add(queue[0].Topic, tallyReleased, len(queue))
		}
	}
	return ids
}

// heads splits a keyed round's published messages at each key's first message
// that failed other than permanently: keep are the messages up to and
// including it (and any acknowledged one after it, which a
// publishers.KeyBatcher does not produce but which was delivered all the
// same), behind the key's later failed ones. A publishers.KeyBatcher did not
// send those, so they are released untouched and wait behind their key's
// head, as they would have waited for their own round. A permanent failure
// stops nothing: its event fails, and the key goes on.
func heads(msgs []outbox.Message, results []error) (keep []outbox.Message, keepResults []error, behind []outbox.Message) {
	if !slices.ContainsFunc(results, func(err error) bool { return err != nil }) {
		return msgs, results, nil // every message acknowledged: nothing to split
	}
	stopped := make(map[string]bool)
	for i, m := range msgs {
		k := roundKey(m)
		if stopped[k] && results[i] != nil {
			behind = append(behind, m)
			continue
		}
		if results[i] != nil && !publishers.IsPermanent(results[i]) {
			stopped[k] = true
		}
		keep = append(keep, m)
		keepResults = append(keepResults, results[i])
	}
	return keep, keepResults, behind
}

func idsOf(msgs []outbox.Message) []uuid.UUID {
	ids := make([]uuid.UUID, len(msgs))
	for i := range msgs {
		ids[i] = msgs[i].ID
	}
	return ids
}

// decodeAll turns a batch's rows into its rounds of messages; malformed
// rows go to out.failures. An unordered batch is published oldest first
// (UUIDv7 ids sort by creation time); an ordered one in the order its
// transactions wrote it.
func (p *pipeline) decodeAll(b *batch, out *outcome) *rounds {
	rows := b.rows
	if b.ordered {
		rows = slices.Clone(rows)
		slices.SortFunc(rows, func(a, b store.Row) int {
			return cmp.Or(cmp.Compare(a.Tx, b.Tx), slices.Compare(a.ID[:], b.ID[:]))
		})
	}
	msgs := make([]outbox.Message, 0, len(rows))
	for _, row := range rows {
		msg, err := p.decode(row)
		if err != nil {
			out.Failures = append(out.Failures, store.Failure{ID: row.ID, Error: err.Error()})
			out.topics.add(row.Topic, tallyFailed, 1)
			continue
		}
		msgs = append(msgs, msg)
	}
	if !b.ordered {
		slices.SortFunc(msgs, func(a, b outbox.Message) int { return bytes.Compare(a.ID[:], b.ID[:]) })
		return &rounds{all: msgs}
	}
	if p.keyBatches {
		return &rounds{all: msgs, keyed: true}
	}
	q := &rounds{queues: map[string][]outbox.Message{}}
	for _, msg := range msgs {
		k := roundKey(msg)
		if _, seen := q.queues[k]; !seen {
			q.keys = append(q.keys, k)
		}
		q.queues[k] = append(q.queues[k], msg)
	}
	return q
}

// decode turns a claimed row into a message; an error means the row is
// too large, malformed or rescued too often, and goes to failed with that
// reason.
func (p *pipeline) decode(x store.Row) (outbox.Message, error) {
	msg := outbox.Message{ID: x.ID, Topic: x.Topic, Key: x.Key, Payload: x.Payload, Attempt: x.Attempt, CreatedAt: x.CreatedAt.Time}
	if claimBytesOf(p.cfg).TooLarge(&x) {
		return msg, fmt.Errorf("event too large: %d bytes of payload, key and headers exceed the limit of %d (MaxEventBytes); the relay did not read them", x.Size, p.cfg.MaxEventBytes)
	}
	if x.Attempt > p.cfg.MaxAttempts {
		return msg, fmt.Errorf("attempt %d exceeds max attempts %d: earlier claims ended without a recorded outcome (relay died or lost its lease), or max attempts was lowered", x.Attempt, p.cfg.MaxAttempts)
	}
	if !x.CreatedAt.Finite() {
		return msg, errors.New("malformed row: created_at is not a finite time")
	}
	if err := outbox.ValidateTopic(x.Topic); err != nil {
		return msg, fmt.Errorf("malformed row: %w", err)
	}
	// *string tells a JSON null value apart from "": the relay must not
	// invent a value. A JSON null instead of the object means no headers.
	var headers map[string]*string
	if err := json.Unmarshal(x.Headers, &headers); err != nil {
		return msg, fmt.Errorf("malformed row: headers are not a JSON object of string values: %s", err)
	}
	if headers != nil {
		msg.Headers = make(map[string]string, len(headers))
	}
	for name, value := range headers {
		if value == nil {
			return msg, fmt.Errorf("malformed row: headers are not a JSON object of string values: the value of %q is null", name)
		}
		msg.Headers[name] = *value
	}
	if err := outbox.ValidateHeaders(msg.Headers); err != nil {
		return msg, fmt.Errorf("malformed row: %w", err)
	}
	return msg, nil
}
