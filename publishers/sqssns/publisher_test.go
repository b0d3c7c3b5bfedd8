package sqssns_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/sqssns"
)

func newSQS(t *testing.T, endpoint string) *sqssns.Publisher {
	p, err := sqssns.NewSQS(sqssns.Config{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// A FIFO queue takes each event once within the deduplication window (the
// event id is the MessageDeduplicationId), keeps each group's order across
// the batches of one call (25 messages: 3 requests), and carries a binary
// key byte for byte.
func TestFIFODedupOrderAndBinaryKey(t *testing.T) {
	t.Parallel()
	url0 := startService(t)
	c := newClients(t, url0)
	name, url := c.queue(t, true)
	p := newSQS(t, url0)
	var msgs []outbox.Message
	for i := range 25 {
		msgs = append(msgs, outbox.Message{ID: uuid.New(), Topic: name, Key: []byte{0, 0xff, byte(i % 2)}, Payload: fmt.Appendf(nil, "%d", i)})
	}
	for range 2 {
		if err := p.Publish(testCtx(t), msgs); err != nil {
			t.Fatal(err)
		}
	}
	got := c.read(t, name, url)
	if len(got) != len(msgs) {
		t.Fatalf("%d messages arrived, want %d (one per event id)", len(got), len(msgs))
	}
	for i, r := range got {
		if r.EventID != msgs[i].ID.String() || string(r.Key) != string(msgs[i].Key) || !strings.HasPrefix(r.Stream, "sha256:") {
			t.Errorf("message %d arrived as %+v, sent as %+v", i, r, msgs[i])
		}
	}
}

// What SQS cannot carry fails permanently, alone, saying why: more than 10
// attributes, a missing queue; an event without key is its own group.
func TestPermanentFailures(t *testing.T) {
	t.Parallel()
	url0 := startService(t)
	c := newClients(t, url0)
	name, url := c.queue(t, true)
	p := newSQS(t, url0)
	headers := map[string]string{}
	for i := range 9 {
		headers[fmt.Sprintf("h%d", i)] = "v"
	}
	msgs := []outbox.Message{
		{ID: uuid.New(), Topic: name, Key: []byte("k"), Payload: []byte("too many"), Headers: headers},
		{ID: uuid.New(), Topic: "no-such-queue", Payload: []byte("missing")},
		{ID: uuid.New(), Topic: name, Payload: []byte("keyless")},
	}
	var errs publishers.Errors
	if err := p.Publish(testCtx(t), msgs); !errors.As(err, &errs) {
		t.Fatalf("Publish: %v, want a publishers.Errors", err)
	}
	if !publishers.IsPermanent(errs[0]) || !errors.Is(errs[0], sqssns.ErrTooManyAttributes) || !strings.Contains(errs[0].Error(), "10") {
		t.Errorf("11 attributes: %v, want a permanent ErrTooManyAttributes naming the limit", errs[0])
	}
	if !publishers.IsPermanent(errs[1]) || !errors.Is(errs[1], sqssns.ErrNoDestination) {
		t.Errorf("missing queue: %v, want a permanent ErrNoDestination", errs[1])
	}
	if errs[2] != nil {
		t.Errorf("keyless message: %v", errs[2])
	}
	if got := c.read(t, name, url); len(got) != 1 || got[0].Stream != msgs[2].ID.String() {
		t.Errorf("arrived %+v, want the keyless message alone, grouped by its event id", got)
	}
}

// Probe fails with a cancelled ctx.
func TestProbeCancelled(t *testing.T) {
	t.Parallel()
	p := newSQS(t, startService(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Probe(ctx); err == nil {
		t.Error("Probe with a cancelled ctx returned nil")
	}
}

// Name maps outbox topics to queue and topic names.
func TestName(t *testing.T) {
	t.Parallel()
	for topic, want := range map[string]string{
		"orders": "orders", "orders.created": "orders-created", "orders.created.fifo": "orders-created.fifo", "a/b c": "a-b-c",
	} {
		if got := sqssns.Name(topic); got != want {
			t.Errorf("Name(%q) = %q, want %q", topic, got, want)
		}
	}
}
