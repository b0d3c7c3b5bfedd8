package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// retryAfterPublisher refuses every message, asking to be retried after
// its wait.
type retryAfterPublisher struct{ after time.Duration }

func (p retryAfterPublisher) Publish(_ context.Context, msgs []outbox.Message) error {
	errs := make(publishers.Errors, len(msgs))
	for i := range errs {
		errs[i] = publishers.RetryAfter(errors.New("429 too many requests"), p.after)
	}
	return errs
}

func (retryAfterPublisher) Close() error { return nil }

// A transient failure that says when to retry is retried no sooner than
// that, and no later than BackoffMax.
func TestRetryAfterSetsTheRetryDelay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		after      time.Duration
		atLeast    time.Duration
		atMost     time.Duration
		backoffMax time.Duration
	}{
		{"longer than the backoff", 20 * time.Second, 20 * time.Second, 21 * time.Second, time.Minute},
		{"capped by BackoffMax", time.Hour, 30 * time.Second, 31 * time.Second, 30 * time.Second},
		{"shorter than the backoff", time.Millisecond, 100 * time.Millisecond, 2 * time.Second, time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool, table := testdb.New(t)
			testdb.InsertPending(t, pool, table, 1)
			r := quietRelay(t, pool, retryAfterPublisher{c.after}, Config{Table: table, BackoffMin: 100 * time.Millisecond, BackoffMax: c.backoffMax})
			res, err := r.ProcessBatch(context.Background(), 0)
			if err != nil || res.Retried != 1 {
				t.Fatalf("ProcessBatch = %+v, %v; want 1 retried", res, err)
			}
			var wait time.Duration
			var lastError string
			err = pool.QueryRow(context.Background(), "SELECT next_retry_at - now(), last_error FROM "+table.Ident()).Scan(&wait, &lastError)
			if err != nil {
				t.Fatal(err)
			}
			if wait < c.atLeast-time.Second || wait > c.atMost {
				t.Errorf("next attempt in %v; want between %v and %v", wait, c.atLeast, c.atMost)
			}
			if lastError == "" {
				t.Error("last_error is empty")
			}
		})
	}
}
