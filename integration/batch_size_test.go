package integration

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// claimSizes records the rows of each claim that found some.
type claimSizes struct {
	mu   sync.Mutex
	rows []int
}

func (c *claimSizes) Observe(e relay.Event) {
	if e.Kind == relay.EventClaimed && e.Rows > 0 {
		c.mu.Lock()
		c.rows = append(c.rows, e.Rows)
		c.mu.Unlock()
	}
}

func (c *claimSizes) get() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.rows)
}

// In a backlog, Run's claims start at BatchMin and double while they come
// back full, up to BatchSize.
func TestBatchesGrowInABacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(600, "orders", "g") // before the relay starts: a backlog
	claims := &claimSizes{}
	b.startRelay(&sink{}, relay.Config{BatchMin: 10, BatchSize: 80, Workers: 1, Observer: claims})
	await(t, 20*time.Second, func() bool { return b.count("status = 'sent'") == len(ids) }, "not all sent: %v", b.statuses())
	got := claims.get()
	if len(got) < 5 || !slices.Equal(got[:4], []int{10, 20, 40, 80}) {
		t.Fatalf("claims took %v rows, want 10, 20, 40, 80 first", got)
	}
	if m := slices.Max(got); m != 80 {
		t.Fatalf("the largest claim took %d rows, want BatchSize 80: %v", m, got)
	}
}

// BatchBytes stops the growth where the rows' bytes reach it.
func TestBatchesStayUnderTheirBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msgs := make([]outbox.Message, 300)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "orders", Payload: append(bytes.Repeat([]byte("x"), 1000), fmt.Sprint(i)...)}
	}
	ids := b.write(msgs...)
	claims := &claimSizes{}
	// Rows of about 1 KB: 30 fit in 32,000 bytes.
	b.startRelay(&sink{}, relay.Config{BatchMin: 10, BatchSize: 1000, BatchBytes: 32_000, Workers: 1, Observer: claims})
	await(t, 20*time.Second, func() bool { return b.count("status = 'sent'") == len(ids) }, "not all sent: %v", b.statuses())
	got := claims.get()
	if m := slices.Max(got); m < 20 || m > 32 {
		t.Fatalf("claims took %v rows; want them to grow past 10 and stop near 30 (32,000 bytes of 1 KB rows)", got)
	}
}
