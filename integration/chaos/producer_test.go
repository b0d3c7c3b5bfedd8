package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/history"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// keysPerWriter is how many keys each writer owns in each topic.
const keysPerWriter = 16

// rollbackShare is the share of transactions the producer rolls back.
const rollbackShare = 0.1

// producer writes events in real transactions and records how each ended.
// Each writer owns its keys, and writes one transaction after another, so a
// key's events are written in Seq order.
type producer struct {
	db database
	w  *outbox.Writer
	// ordered and plain are the topics written to; with ordered "" (a
	// database without ordered topics), plain alone.
	ordered, plain string

	mu   sync.Mutex
	txns []history.Txn
}

// run writes until ctx ends, txPerSecond transactions per second across
// writers goroutines.
func (p *producer) run(ctx context.Context, writers, txPerSecond int, seed uint64) {
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.writer(ctx, i, time.Second*time.Duration(writers)/time.Duration(txPerSecond), rand.New(rand.NewPCG(seed, uint64(i)+100)))
		}()
	}
	wg.Wait()
}

// keyState is one key a writer owns and the Seq of its next event.
type keyState struct {
	topic, name string
	next        int
}

func (p *producer) writer(ctx context.Context, id int, every time.Duration, rng *rand.Rand) {
	var keys []*keyState
	for k := range keysPerWriter {
		if p.ordered != "" {
			keys = append(keys, &keyState{topic: p.ordered, name: fmt.Sprintf("o%d-%d", id, k)})
		}
		keys = append(keys, &keyState{topic: p.plain, name: fmt.Sprintf("p%d-%d", id, k)})
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// One to three events, of distinct keys.
		var batch []*keyState
		for _, i := range rng.Perm(len(keys))[:1+rng.IntN(3)] {
			batch = append(batch, keys[i])
		}
		if tx, ok := p.transaction(ctx, batch, rng.Float64() < rollbackShare); ok {
			p.mu.Lock()
			p.txns = append(p.txns, tx)
			p.mu.Unlock()
		}
	}
}

// transaction writes one event per key in one transaction, then commits or
// rolls back, and reports how it ended; ok is false when not even BEGIN
// succeeded. Every attempted event takes its key's next Seq, so a key's
// Seq order is its write order whatever the outcomes.
func (p *producer) transaction(ctx context.Context, keys []*keyState, rollback bool) (_ history.Txn, ok bool) {
	tx, err := p.db.begin(ctx)
	if err != nil {
		return history.Txn{}, false // the database down or ctx over: nothing written
	}
	defer tx.rollback(ctx) // no-op after commit
	out := history.Txn{Outcome: history.RolledBack}
	for _, k := range keys {
		seq := k.next
		k.next++
		res, err := p.w.Write(ctx, tx.executor(), outbox.Message{Topic: k.topic, Key: []byte(k.name), Payload: payload(k.name, seq)})
		if err != nil {
			out.At = time.Now()
			return out, true // the transaction is aborted: none of it commits
		}
		out.Events = append(out.Events, history.Event{ID: res.ID.String(), Topic: k.topic, Key: k.name, Seq: seq})
	}
	if rollback {
		out.At = time.Now()
		return out, true
	}
	// COMMIT's answer decides: success is committed; an error (the
	// connection broke, the server restarted, ctx ended) leaves the outcome
	// unknown, as the commit may have happened before the answer was lost.
	err = tx.commit(ctx)
	out.At = time.Now()
	if err != nil {
		out.Outcome = history.Unknown
		return out, true
	}
	out.Outcome = history.Committed
	return out, true
}

// payload is about 200 bytes, like the benchmarks' events.
func payload(key string, seq int) []byte {
	s := fmt.Sprintf("%s:%d:", key, seq)
	return []byte(s + strings.Repeat("x", max(0, 200-len(s))))
}

// history returns the transactions recorded so far.
func (p *producer) history() []history.Txn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]history.Txn(nil), p.txns...)
}
