package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// The pipeline moves one batch: claim → decode → publish → classify →
// record. A claimer (claim.go) decides how rows are claimed, held and
// recorded; the rest is the same for every claim strategy.

// pipeline is one batch's path: claim, decode, publish, classify the
// results, record the outcome (pipeline.go, rounds.go, classify.go,
// record.go). Run's loops and ProcessBatch send their batches through it.
type pipeline struct {
	cfg        Config
	pub        publishers.Publisher
	obs        Observer // cfg.Observer
	store      store.Store
	log        *slog.Logger
	sink       *breaker // the sink's outage state (outage.go)
	tokens     *tokens
	keyBatches bool          // pub takes several events of one key per call (publishers.KeyBatcher)
	batches    atomic.Int32  // batches between their claim and their recorded outcome
	took       atomic.Uint64 // claims that took rows so far
}

// process runs the pipeline once: it claims up to limit rows with c (BatchSize when
// limit <= 0), publishes them and records the outcome. published, when not
// nil, is called once the publish is over, before the outcome is recorded
// (Run lets another worker claim then); it is not called when the claim
// finds nothing or fails.
func (p *pipeline) process(ctx context.Context, c claimer, limit int, published func()) (BatchResult, error) {
	res, _, err := p.processIn(ctx, c, limit, nil, published, nil)
	return res, err
}

// processIn is process for one of Run's loops: each step of the batch
// records progress in slot, the loop's progress slot (liveness.go), which
// is marked waiting when the batch is over.
//
// With sizes, the claim's outcome adjusts the loop's adaptive batch size
// as soon as it is known, so that another worker's next claim follows it.
// full reports a claim that came back full (store.Bounds.Full): more rows
// may wait.
func (p *pipeline) processIn(ctx context.Context, c claimer, limit int, sizes *batchSizer, published func(), slot *atomic.Int64) (res BatchResult, full bool, err error) {
	if limit <= 0 {
		limit = p.cfg.BatchSize
	}
	if ctx.Err() != nil {
		return BatchResult{}, false, nil
	}
	// Statements outlive ctx, within the shutdown bound: a claim whose
	// result is lost to a cancellation would strand rows until their lease
	// ends, and an outcome must be recorded.
	hard, stopHard := shutdownBound(ctx, p.cfg)
	defer stopHard()
	p.batches.Add(1)
	defer p.batches.Add(-1)
	beat(slot)
	defer rest(slot)
	owner := p.tokens.next()
	start := time.Now()
	b, err := c.claim(ctx, hard, owner, limit)
	if sizes != nil && errors.Is(err, context.DeadlineExceeded) && hard.Err() == nil {
		sizes.timedOut(limit)
	}
	if err != nil || b == nil {
		return BatchResult{}, false, err
	}
	beat(slot)
	bytes := claimBytesOf(p.cfg)
	if sizes != nil {
		sizes.observe(limit, len(b.rows), bytes.RowBytes(b.rows))
	}
	full = bytes.Full(limit, b.rows)
	b.slot = slot
	if b.end != nil {
		defer b.end(hard)
	}
	b.ph = phases{mode: b.mode, claim: time.Since(start)}
	p.observe(Event{Kind: EventClaimed, Claim: b.mode, Rows: len(b.rows), Duration: b.ph.claim, Topics: p.claimedTopics(b.rows)})
	if len(b.rows) == 0 {
		return BatchResult{}, false, nil
	}
	p.took.Add(1)
	res = BatchResult{Claimed: len(b.rows)}
	out := p.publish(ctx, hard, b, &res)
	if published != nil {
		published()
	}
	beat(slot)
	start = time.Now()
	queued, err := b.record(hard, owner, &out, &res)
	if err != nil || queued {
		return res, full, err
	}
	b.ph.record = time.Since(start)
	p.logBatch(res, b.ph, out.Retries, out.Failures, out.topics)
	return res, full, nil
}

// outcome is what is to be recorded for a claimed batch.
type outcome struct {
	store.Outcome // the rows sent, retried and failed
	released      []uuid.UUID
	// topics counts the rows by topic and outcome, for the Observer; nil
	// without one.
	topics *topicTally
}

// publish decodes a batch's rows and publishes the messages in rounds
// while b.renew keeps the claim's hold on them, and returns the outcome to
// record; it counts the outage and abandoned rows in res. An unordered
// batch is one round. An ordered batch's rounds carry at most one event
// per key (or, for a publishers.KeyBatcher sink, every event of the batch in one
// round, in write order), and a key's next event goes out only after the
// previous one was acknowledged; a key whose event did not get through
// stops there: its
// later events are released untouched and wait behind it
// (HeadOfLineWait), unless the event failed for good or was parked
// (HeadOfLinePark), in which case the key goes on. Rounds stop at
// shutdown and when the sink is down; events not attempted are released.
func (p *pipeline) publish(ctx, hard context.Context, b *batch, res *BatchResult) outcome {
	out := outcome{topics: p.newTopicTally()}
	q := p.decodeAll(b, &out)
	stop := p.keepLeases(hard, b.renew)
	published := 0 // messages handed to the sink, over all rounds
	for ctx.Err() == nil {
		msgs := q.next()
		if len(msgs) == 0 {
			break
		}
		start := time.Now()
		results, cut := p.publishOnce(ctx, msgs)
		b.ph.publish += time.Since(start)
		beat(b.slot)
		published += len(msgs)
		if q.keyed && cut == publishWhole {
			var behind []outbox.Message
			msgs, results, behind = heads(msgs, results)
			out.released = append(out.released, idsOf(behind)...)
			for _, m := range behind {
				out.topics.add(m.Topic, tallyReleased, 1)
			}
		}
		down, finished := p.classify(msgs, results, cut, b.park, &out, res)
		for i := range msgs {
			if !finished[i] { // the key waits behind this event
				behind := q.drop(msgs[i])
				out.released = append(out.released, behind...)
				out.topics.add(msgs[i].Topic, tallyReleased, len(behind))
			}
		}
		if cut != publishWhole || down {
			break
		}
	}
	stop()
	if published > 0 {
		p.observe(Event{Kind: EventPublished, Claim: b.mode, Rows: published, Duration: b.ph.publish})
	}
	out.released = append(out.released, q.rest(out.topics)...)
	return out
}

// publishCut says whether, and how, a publish was cut short.
type publishCut int

const (
	// publishWhole: Publish returned its results.
	publishWhole publishCut = iota
	// publishInterrupted: shutdown ended Publish's context and Publish
	// returned: nothing more is sent, the rows can be given back.
	publishInterrupted
	// publishAbandoned: Publish did not return within abandonAfter of its
	// context's end. The sink may still send the messages, so their rows
	// are left to their lease.
	publishAbandoned
)

// publishOnce makes one Publish call bounded by PublishTimeout; when ctx is
// cancelled (shutdown) the call gets ShutdownTimeout more. A Publish that
// does not return within abandonAfter of its context's end is left
// running, and its results are nil.
func (p *pipeline) publishOnce(ctx context.Context, msgs []outbox.Message) (results []error, cut publishCut) {
	sctx, stop := outlive(ctx, p.cfg.ShutdownTimeout)
	defer stop()
	pctx, cancel := context.WithTimeout(sctx, p.cfg.PublishTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.pub.Publish(pctx, msgs) }()
	var err error
	select {
	case err = <-done:
	case <-pctx.Done():
		t := time.NewTimer(abandonAfter)
		select {
		case err = <-done:
			t.Stop()
		case <-t.C:
			p.log.Warn("the sink did not return from a publish after its deadline; its claim keeps its lease (its rows', or an ordered batch's shard's) until it ends",
				"rows", len(msgs), "lease", p.cfg.Lease)
			return nil, publishAbandoned
		}
	}
	if err != nil && ctx.Err() != nil && pctx.Err() != nil {
		cut = publishInterrupted
	}
	return publishers.PerMessage(err, len(msgs)), cut
}

// keepLeases calls renew every Lease/3 until stop is called, under hard,
// the batch's shutdown bound. renew keeps a claim's hold on its rows and
// returns how many rows it had lost. Callers stop it as soon as their publishes, each
// bounded by PublishTimeout, are over: a stuck publish does not hold its
// rows longer than that. stop waits for a renewal in flight instead of
// cancelling it: a lock claim's renewal runs in the claim's transaction,
// which a cancelled statement would abort.
func (p *pipeline) keepLeases(hard context.Context, renew func(context.Context) (int, error)) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(p.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				// A renewal may take up to a lease: a lock claim's runs on
				// the claim's connection, which pgx closes when a statement
				// outlives its deadline, ending the transaction.
				hctx, cancel := context.WithTimeout(hard, p.cfg.Lease)
				lost, err := renew(hctx)
				cancel()
				switch {
				case err != nil:
					p.log.Warn("extending lease failed", "error", err)
				case lost > 0:
					p.log.Warn("lease lost while publishing; another claim may publish these rows too", "rows", lost)
					p.observe(Event{Kind: EventLeaseLost, Rows: lost})
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// observe passes e to the configured Observer, if any. With none it costs
// a nil check.
func (p *pipeline) observe(e Event) {
	if p.obs != nil {
		p.obs.Observe(e)
	}
}

// beat records progress in slot; a nil slot (ProcessBatch) records nothing.
func beat(slot *atomic.Int64) {
	if slot != nil {
		slot.Store(time.Now().UnixNano())
	}
}

// rest marks slot as waiting.
func rest(slot *atomic.Int64) {
	if slot != nil {
		slot.Store(0)
	}
}
