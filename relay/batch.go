package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// ProcessBatch claims up to limit rows (BatchSize when limit <= 0),
// publishes them and records the outcome. Run calls it in a loop; it is
// exported for callers that drive the relay themselves, and safe for
// concurrent use. A cancelled ctx stops a claim from starting; a publish in
// flight then gets ShutdownTimeout to finish before its rows are released.
// The error reports database failures; sink failures are recorded per row
// and counted in the result. With ClaimLock the claim, the publish and the
// outcome share one transaction (lock.go).
//
// Outcomes per message: acknowledged rows are sent; permanent failures and
// malformed rows fail at once; transient failures are retried with backoff
// until MaxAttempts, then fail. When nothing of the batch was acknowledged
// and the failures say the sink is down (it reported itself unavailable, or
// two or more messages failed transiently, or a probe did during an
// outage), those rows go back to pending, due at once, with their attempt
// given back, and the relay is in an outage until the sink answers again
// (outage.go): Run claims nothing meanwhile. A message the sink reports
// unavailable while others got through (one unreachable partition, say) is
// deferred by BackoffMin, also without spending its attempt. A publish
// that does not return within half a second of its deadline is abandoned:
// its rows get no outcome and return when their lease ends.
func (r *Relay) ProcessBatch(ctx context.Context, limit int) (BatchResult, error) {
	return r.processBatch(ctx, limit, inLoop{})
}

// inLoop is what Run's workers change in ProcessBatch.
type inLoop struct {
	// published, when not nil, is called once the batch's publish is over,
	// before its outcome is recorded: Run lets another worker claim then.
	// It is not called when the claim finds nothing or fails.
	published func()
	// ride marks the rows of a lease batch the sink took whole, of fewer
	// than rideMax rows, sent with a later claim (ride.go): its result
	// then counts them claimed only.
	// The claim also marks the rows of earlier such batches, and looks for
	// lapsed leases only if no claim did within lapsedEvery; other claims
	// start at the floor (floor.go).
	ride bool
}

// processBatch is ProcessBatch with Run's changes.
func (r *Relay) processBatch(ctx context.Context, limit int, loop inLoop) (BatchResult, error) {
	if limit <= 0 {
		limit = r.cfg.BatchSize
	}
	if err := ctx.Err(); err != nil {
		return BatchResult{}, nil
	}
	// Statements outlive ctx, within the shutdown bound: a claim whose
	// result is lost to a cancellation would strand rows until their lease
	// ends, and an outcome must be recorded.
	hard, stopHard := r.shutdownBound(ctx)
	defer stopHard()
	r.batches.Add(1)
	defer r.batches.Add(-1)
	owner := r.cfg.ID + "#" + strconv.FormatUint(r.seq.Add(1), 10)
	if r.cfg.Claim == ClaimLock {
		return r.processLocked(ctx, hard, owner, limit, loop.published)
	}
	cctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	defer cancel()
	r.claiming.Lock()
	if ctx.Err() != nil { // cancelled while another claim ran
		r.claiming.Unlock()
		return BatchResult{}, nil
	}
	var riders []rider
	if loop.ride {
		riders = r.rides.take()
	}
	// A claim that looks for lapsed leases reads pending rows from the
	// bottom too: it takes what turned up below the floor.
	lapsed := !loop.ride || r.lapsedDue()
	floor := bottom
	if !lapsed {
		floor = r.floor
	}
	start := time.Now()
	rows, fenced, err := r.store.claim(cctx, owner, limit, lapsed, floor, riders)
	if err == nil && loop.ride {
		r.floor = nextFloor(rows, limit)
	}
	r.claiming.Unlock()
	if err != nil {
		r.rides.add(riders...) // for the next claim, or on their own
		return BatchResult{}, err
	}
	claimed := time.Since(start)
	r.observe(Event{Kind: EventClaimed, Claim: ClaimLease, Rows: len(rows), Duration: claimed})
	for i, rd := range riders {
		rd.ph.record = claimed
		r.rode(rd, fenced[i])
	}
	if len(rows) == 0 {
		return BatchResult{}, nil
	}
	res := BatchResult{Claimed: len(rows)}
	ph := phases{mode: ClaimLease, claim: claimed}
	ids := make([]uuid.UUID, len(rows))
	for i := range rows {
		ids[i] = rows[i].id
	}
	out := r.publishClaimed(ctx, hard, rows, r.extender(owner, ids), &res, &ph)
	if loop.published != nil {
		loop.published()
	}
	if loop.ride && len(out.sent) == len(rows) && len(rows) < rideMax {
		r.rides.add(rider{owner: owner, ids: out.sent, res: res, ph: ph})
		return res, nil
	}
	start = time.Now()
	if err := r.record(hard, owner, &out, &res); err != nil {
		return res, err
	}
	ph.record = time.Since(start)
	r.logBatch(res, ph, out.retries, out.failures)
	return res, nil
}

// lapsedEvery is how often Run's lease claims look for lapsed leases. The
// lapsed-lease branch reads processing_idx from its oldest entry, and until
// a VACUUM that index keeps a dead entry for every row claimed and sent
// since: a busy relay claiming every few milliseconds would read them all
// again each time. Idle relays, which claim once a poll interval, look
// every time.
const lapsedEvery = 250 * time.Millisecond

// lapsedDue reports whether this claim should look for lapsed leases, and
// if so counts it as having looked. Callers hold r.claiming.
func (r *Relay) lapsedDue() bool {
	now := time.Now()
	if now.Sub(r.lapsedAt) < lapsedEvery {
		return false
	}
	r.lapsedAt = now
	return true
}

// outcome is what is to be recorded for a claimed batch.
type outcome struct {
	sent, released []uuid.UUID
	retries        []retry
	failures       []failure
}

// decodeAll turns claimed rows into messages, oldest first; malformed rows
// go to out.failures.
func (r *Relay) decodeAll(rows []row, out *outcome) []outbox.Message {
	msgs := make([]outbox.Message, 0, len(rows))
	for _, row := range rows {
		msg, err := r.decode(row)
		if err != nil {
			out.failures = append(out.failures, failure{row.id, err.Error()})
			continue
		}
		msgs = append(msgs, msg)
	}
	// UUIDv7 ids sort by creation time: publish a batch oldest first.
	slices.SortFunc(msgs, func(a, b outbox.Message) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	return msgs
}

// classify decides each published message's outcome from its result (see
// ProcessBatch), keeps the relay's outage state, and reports whether the
// sink is down and which messages are finished (sent, or failed for good).
// With park (HeadOfLinePark), a transient failure fails its message at once.
func (r *Relay) classify(msgs []outbox.Message, results []error, cut publishCut, park bool, out *outcome, res *BatchResult) (down bool, finished []bool) {
	if cut == publishAbandoned {
		// No outcome: the sink may still be sending them. They keep
		// their lease.
		res.Abandoned += len(msgs)
		return false, make([]bool, len(msgs))
	}
	interrupted := cut == publishInterrupted
	down = !interrupted && sinkDown(results, r.sink.inOutage())
	sent, answered, deferred, cause := false, false, 0, ""
	finished = make([]bool, len(msgs))
	for i, msg := range msgs {
		failed := len(out.failures)
		switch err := results[i]; {
		case err == nil:
			out.sent = append(out.sent, msg.ID)
			sent, finished[i] = true, true
		case interrupted:
			out.released = append(out.released, msg.ID)
		case publishers.IsPermanent(err):
			out.failures = append(out.failures, failure{msg.ID, publishers.Describe(err)})
			answered = true // an answer about the message: the sink works
		case down:
			// Due at once: no loop claims it before the sink answers.
			out.retries = append(out.retries, retry{msg.ID, 0, publishers.Describe(err), true})
			deferred++
			if cause == "" {
				cause = publishers.Describe(err)
			}
		case errors.Is(err, publishers.ErrUnavailable):
			out.retries = append(out.retries, retry{msg.ID, r.cfg.BackoffMin, publishers.Describe(err), true})
		case park:
			out.failures = append(out.failures, failure{msg.ID, "parked: " + publishers.Describe(err)})
		case msg.Attempt >= r.cfg.MaxAttempts:
			out.failures = append(out.failures, failure{msg.ID, fmt.Sprintf("attempt %d of %d: %s", msg.Attempt, r.cfg.MaxAttempts, publishers.Describe(err))})
		default:
			out.retries = append(out.retries, retry{msg.ID, retryDelay(msg.Attempt, r.cfg.BackoffMin, r.cfg.BackoffMax), publishers.Describe(err), false})
		}
		if len(out.failures) > failed {
			finished[i] = true // failed for good
		}
	}
	if down {
		res.SinkUnavailable = true
		res.Backoff = r.sink.wentDown(cause, deferred)
	}
	if sent || answered && !down {
		r.sink.answered()
	}
	return down, finished
}

// record writes the outcome back, fenced by owner, and counts it in res.
// hard is the batch's shutdown bound (shutdownBound), not a context that a
// shutdown cancels. The write-back gets its own deadline, a lease from
// now: the publish may have run longer than a lease while the heartbeat
// kept the rows.
func (r *Relay) record(hard context.Context, owner string, out *outcome, res *BatchResult) error {
	wctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	defer cancel()
	steps := []struct {
		what  string
		count *int
		n     int
		do    func(context.Context) (int, error)
	}{
		{"sent", &res.Sent, len(out.sent), func(ctx context.Context) (int, error) { return r.store.markSent(ctx, owner, out.sent) }},
		{"retry", &res.Retried, len(out.retries), func(ctx context.Context) (int, error) { return r.store.markRetry(ctx, owner, out.retries) }},
		{"failed", &res.Failed, len(out.failures), func(ctx context.Context) (int, error) { return r.store.markFailed(ctx, owner, out.failures) }},
		{"release", &res.Released, len(out.released), func(ctx context.Context) (int, error) { return r.store.release(ctx, owner, out.released) }},
	}
	for _, step := range steps {
		fenced, err := r.retryWrite(wctx, step.do)
		if err != nil {
			return fmt.Errorf("record outcome (%s) of %d claimed rows: %w; they return after the lease", step.what, res.Claimed, err)
		}
		*step.count = step.n - fenced
		res.Fenced += fenced
	}
	return nil
}

// sinkDown reports whether a batch's results say the sink is down rather
// than that some messages are bad: nothing was acknowledged, and either the
// sink said it is unavailable, or several messages all failed transiently,
// or one did while the sink was already down (a probe). Otherwise a lone
// transient failure is charged to its message, so that an event the sink
// keeps refusing still reaches failed after MaxAttempts.
func sinkDown(results []error, alreadyDown bool) bool {
	unavailable, transient := false, 0
	for _, err := range results {
		switch {
		case err == nil:
			return false
		case errors.Is(err, publishers.ErrUnavailable):
			unavailable = true
		case !publishers.IsPermanent(err):
			transient++
		}
	}
	return unavailable || transient >= 2 || alreadyDown && transient > 0
}

// publishClaimed decodes claimed rows and publishes the messages while
// extend keeps the claim's hold on them; it returns the outcome to record
// and counts the outage in res. hard is the batch's shutdown bound.
func (r *Relay) publishClaimed(ctx, hard context.Context, rows []row, extend func(context.Context) (int, error), res *BatchResult, ph *phases) outcome {
	var out outcome
	msgs := r.decodeAll(rows, &out)
	if len(msgs) > 0 {
		start := time.Now()
		stop := r.keepLeases(hard, extend, nil)
		results, cut := r.publishOnce(ctx, msgs)
		stop()
		ph.publish = time.Since(start)
		r.observe(Event{Kind: EventPublished, Claim: ph.mode, Rows: len(msgs), Duration: ph.publish})
		r.classify(msgs, results, cut, false, &out, res)
	}
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
func (r *Relay) publishOnce(ctx context.Context, msgs []outbox.Message) (results []error, cut publishCut) {
	sctx, stop := outlive(ctx, r.cfg.ShutdownTimeout)
	defer stop()
	pctx, cancel := context.WithTimeout(sctx, r.cfg.PublishTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.pub.Publish(pctx, msgs) }()
	var err error
	select {
	case err = <-done:
	case <-pctx.Done():
		t := time.NewTimer(abandonAfter)
		select {
		case err = <-done:
			t.Stop()
		case <-t.C:
			r.log.Warn("the sink did not return from a publish after its deadline; its rows keep their lease and return when it ends",
				"rows", len(msgs), "lease", r.cfg.Lease)
			return nil, publishAbandoned
		}
	}
	if err != nil && ctx.Err() != nil && pctx.Err() != nil {
		cut = publishInterrupted
	}
	return publishers.PerMessage(err, len(msgs)), cut
}

// extender returns the renewal of a lease claim for keepLeases: it extends
// the lease of ids, fenced by owner.
func (r *Relay) extender(owner string, ids []uuid.UUID) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) { return r.store.extend(ctx, owner, ids) }
}

// keepLeases calls extend (and also, if set) every Lease/3 until stop is
// called, under hard, the batch's shutdown bound. extend renews a claim's hold on its rows and returns how many
// rows it had lost. Callers stop it as soon as their publishes, each
// bounded by PublishTimeout, are over: a stuck publish does not hold its
// rows longer than that. stop waits for a renewal in flight instead of
// cancelling it: a lock claim's renewal runs in the claim's transaction,
// which a cancelled statement would abort.
func (r *Relay) keepLeases(hard context.Context, extend func(context.Context) (int, error), also func(context.Context)) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				// A renewal may take up to a lease: a lock claim's runs on
				// the claim's connection, which pgx closes when a statement
				// outlives its deadline, ending the transaction.
				hctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
				if also != nil {
					also(hctx)
				}
				fenced, err := extend(hctx)
				cancel()
				switch {
				case err != nil:
					r.log.Warn("extending lease failed", "error", err)
				case fenced > 0:
					r.log.Warn("lease lost while publishing; another claim may publish these rows too", "rows", fenced)
					r.observe(Event{Kind: EventLeaseLost, Rows: fenced})
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// retryWrite runs a write-back until it succeeds or ctx (bounded by the
// lease) ends: a failed write-back would make the rows publish twice.
func (r *Relay) retryWrite(ctx context.Context, do func(context.Context) (int, error)) (int, error) {
	b := newExponential(50*time.Millisecond, 2*time.Second)
	for {
		fenced, err := do(ctx)
		if err == nil || ctx.Err() != nil {
			return fenced, err
		}
		d := b.NextBackOff()
		r.log.Warn("recording outcome failed; retrying", "error", err, "retry_in", d)
		sleep(ctx, d)
	}
}

// decode turns a claimed row into a message; an error means the row is
// malformed (or rescued too often) and goes to failed with that reason.
func (r *Relay) decode(x row) (outbox.Message, error) {
	msg := outbox.Message{ID: x.id, Topic: x.topic, Key: x.key, Payload: x.payload, Attempt: x.attempt, CreatedAt: x.createdAt.Time}
	if x.attempt > r.cfg.MaxAttempts {
		return msg, fmt.Errorf("attempt %d exceeds max attempts %d: earlier claims ended without a recorded outcome (relay died or lost its lease), or max attempts was lowered", x.attempt, r.cfg.MaxAttempts)
	}
	if !x.createdAt.Valid || x.createdAt.InfinityModifier != pgtype.Finite {
		return msg, errors.New("malformed row: created_at is not a finite time")
	}
	if err := outbox.ValidateTopic(x.topic); err != nil {
		return msg, fmt.Errorf("malformed row: %w", err)
	}
	// *string tells a JSON null value apart from "": the relay must not
	// invent a value. A JSON null instead of the object means no headers.
	var headers map[string]*string
	if err := json.Unmarshal(x.headers, &headers); err != nil {
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

// logBatch logs a batch whose outcome is recorded, and reports it to the
// Observer.
func (r *Relay) logBatch(res BatchResult, ph phases, retries []retry, failures []failure) {
	r.observe(Event{Kind: EventRecorded, Claim: ph.mode, Result: res, Duration: ph.record})
	r.log.Debug("batch done", "claimed", res.Claimed, "sent", res.Sent, "retried", res.Retried,
		"failed", res.Failed, "released", res.Released, "fenced", res.Fenced, "abandoned", res.Abandoned,
		"claim_ms", ms(ph.claim), "publish_ms", ms(ph.publish), "record_ms", ms(ph.record))
	if len(retries) > 0 && !res.SinkUnavailable { // Run logs an outage once, not every probe
		r.log.Warn("publish failed; will retry", "rows", len(retries), "first_id", retries[0].id, "error", retries[0].error, "retry_in", retries[0].delay)
	}
	for _, f := range failures {
		r.log.Error("event failed permanently", "id", f.id, "reason", f.error)
	}
	if res.Fenced > 0 {
		r.log.Warn("outcome not recorded for rows another claim holds now (lease lost)", "rows", res.Fenced)
	}
}

// phases are how long a batch's claim statement, publishing (every round,
// in ordered mode) and recording took, for the debug log.
type phases struct {
	mode                   ClaimMode // ClaimLease, ClaimLock or ClaimOrdered
	claim, publish, record time.Duration
}

// ms is d in milliseconds, for logs.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
