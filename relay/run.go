package relay

import (
	"context"
	"sync"
	"time"
)

// Run waits for the database (retrying with backoff while it is
// unreachable), checks that the schema is migrated, logs whether the sink
// answers, then claims and publishes batches until ctx is cancelled. On
// cancellation it stops claiming, lets the publish in flight finish within
// ShutdownTimeout, records or releases its rows, and returns nil: within
// ShutdownTimeout + 1s of the cancellation, whatever the sink or the
// database does (rows whose outcome could not be written in that time
// return to the other replicas when their lease ends). It returns an error only
// when it cannot serve at all: the table is missing
// (migrations.ErrNotMigrated), or the database refuses the relay's
// statements in a way retrying cannot fix (permission denied, say), at
// start or later.
//
// Unless Config.NoListen is set, Run also LISTENs for the notifications
// inserts send at commit and claims at once when one arrives, rather than
// after PollInterval.
//
// While the sink is down Run claims nothing. A sink that implements
// publishers.Prober is probed every ProbeInterval; others are probed with
// one-row batches, OutageBackoffMin doubling up to OutageBackoffMax apart.
// When the sink answers, every loop claims again at once, starting with the
// rows the outage deferred, which are due at once. An outage is logged once
// when it starts (WARN, with the sink's error), every 30s while it lasts, and
// once when it ends (INFO, with its length and the rows it deferred).
//
// Unless Config.KeepSent is set, Run also runs the retention janitor
// (RunRetention) every JanitorInterval; on cancellation it lets a DELETE
// under way finish and releases the job before returning. On a
// partitioned table it runs the partitions job (RunPartitions) at the
// same interval, whatever KeepSent says.
//
// With lease claims Run also looks for rows below its claim floor and
// lapsed leases beside the claims, on a pool connection of its own
// (docs/architecture.md#claiming): a pool of Workers + 4 connections or
// more (plus Ordering.Loops with ordered topics) lets every part run at
// once, as relay run sizes it.
func (r *Relay) Run(ctx context.Context) error {
	r.live.state.Store(livenessRunning)
	defer r.live.state.Store(livenessStopped)
	if err := r.waitReady(ctx); err != nil || ctx.Err() != nil {
		return err
	}
	if r.cfg.Ordering.enabled() {
		if err := r.shards.EnsureShards(ctx, r.cfg.Ordering.Shards); err != nil {
			return err
		}
		// Advisory: a table not prepared delivers in order, more slowly.
		if ok, err := r.shards.Prepared(ctx); err == nil && !ok {
			r.log.Warn("ordered topics on a table whose primary key is not prepared for them: its full pages slow ordered write-backs down; run `relay migrate up --ordered` (docs/ordering.md#the-primary-key-half-full)")
		}
	}
	if r.prober != nil {
		r.sink.check(ctx, r.prober)
	}
	if r.listener == nil && !r.cfg.NoListen {
		// No notifications to wake it (MySQL): polling alone finds new rows.
		r.log.Info("no LISTEN/NOTIFY on this database; polling", "poll_interval", r.cfg.PollInterval)
	}
	if pg, ok := r.store.(interface{ UnsetSessionSettings() []string }); ok {
		if unset := pg.UnsetSessionSettings(); len(unset) > 0 {
			// A shared pool the caller did not pass through
			// ConfigurePool: the relay works, but its statements may be
			// planned badly (jit compiling each ordered claim's plan).
			r.log.Warn("the pool does not set the relay's session settings; call relay.ConfigurePool on its config", "unset", unset)
		}
	}
	r.log.Info("relay started", "batch_size", r.cfg.BatchSize, "batch_min", r.cfg.BatchMin, "workers", r.cfg.Workers, "lease", r.cfg.Lease, "poll_interval", r.cfg.PollInterval,
		"ordered_topics", r.cfg.Ordering.Topics, "retention", r.retention.describe())
	defer r.log.Info("relay stopped")
	hard, stopHard := shutdownBound(ctx, r.cfg)
	defer stopHard()
	// A fatal database error ends Run early: stop the other loops too.
	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	spawn := func(loop func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(ctx)
		}()
	}
	if r.cfg.Ordering.enabled() {
		for loop := range r.cfg.Ordering.Loops {
			spawn(func(ctx context.Context) { r.runOrdered(ctx, loop) })
		}
	}
	if r.listener != nil {
		spawn(r.listener.loop)
	}
	spawn(r.retention.loop)  // unless KeepSent
	spawn(r.partitions.loop) // on a partitioned table
	if r.prober != nil {
		spawn(func(ctx context.Context) { r.sink.watch(ctx, r.prober) })
	}
	if r.cfg.Claim != ClaimLock {
		spawn(r.stream.runLooks) // below the claim floor, beside the claims (sweep.go)
	}

	// Workers unordered batches in flight: each worker claims, publishes
	// and records its own.
	errc := make(chan error, r.cfg.Workers)
	for worker := range r.cfg.Workers {
		go func() { errc <- r.runUnordered(ctx, worker) }()
	}
	var first error
	for range r.cfg.Workers {
		if err := <-errc; err != nil && first == nil {
			first = err
			stop()
		}
	}
	// Published rows still waiting for a claim are marked sent now.
	r.stream.sent.flush(hard)
	r.stream.sent.waitTimers()
	return first
}

// ProcessBatch claims up to limit rows (BatchSize when limit <= 0),
// publishes them and records the outcome. It is exported for callers that
// drive the relay themselves, and safe for concurrent use. Each call is a
// plain claim: it reads pending rows from the oldest, looks for lapsed
// leases, and marks its own rows sent before it returns. (Run's workers
// claim from the claim floor and batch their mark-sent writes; see
// docs/architecture.md.) A cancelled ctx stops a claim from starting; a
// publish in flight then gets ShutdownTimeout to finish before its rows
// are released. The error reports database failures; sink failures are
// recorded per row and counted in the result. With ClaimLock the claim,
// the publish and the outcome share one transaction (claim_lock.go).
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
	var c claimer = r.leases
	if r.cfg.Claim == ClaimLock {
		c = r.locks
	}
	return r.pipe.process(ctx, c, limit, nil)
}

// runUnordered claims and publishes unordered batches until ctx ends, or
// returns an error retrying cannot fix. While the sink is down (the
// relay's outage state, which every loop shares) the workers wait for it
// to answer; when it cannot be probed otherwise, worker 0 probes it with
// one-row batches.
func (r *Relay) runUnordered(ctx context.Context, worker int) error {
	dbDown := newExponential(r.cfg.OutageBackoffMin, r.cfg.OutageBackoffMax)
	wait := r.cfg.PollMin // a relay that does not listen starts polling often
	var claims claimer = r.stream
	if r.cfg.Claim == ClaimLock {
		claims = r.locks
	}
	for ctx.Err() == nil {
		probe := r.sink.isDown()
		if probe && (r.prober != nil || worker > 0) {
			r.sink.await(ctx, false)
			continue
		}
		limit := r.sizes.next()
		if probe {
			limit = 1 // probe the sink with a single row
		}
		woken := r.turns.begin() // before the claim: a commit during it wakes the wait below
		// The turn ends when the publish does: another worker may claim
		// what committed meanwhile while this one records.
		done := sync.OnceFunc(r.turns.done)
		sizes, c := r.sizes, claimer(invitingClaims{claims, r.turns, claimBytesOf(r.cfg)})
		if probe {
			// A probe's one row says nothing of the backlog.
			sizes, c = nil, claims
		}
		// alone: no other batch was in flight or took rows during this
		// one, so that an empty claim means nothing waits.
		took, idle := r.pipe.took.Load(), r.pipe.batches.Load() == 0
		res, full, err := r.pipe.processIn(ctx, c, limit, sizes, done, r.live.slot(worker))
		alone := idle && r.pipe.batches.Load() == 0 && r.pipe.took.Load() == took
		done()
		switch {
		case err != nil && r.store.Fatal(err):
			// Permission denied, a dropped table: retrying cannot help.
			return err
		case err != nil:
			d := min(dbDown.NextBackOff(), r.cfg.OutageBackoffMax)
			r.log.Warn("database error; retrying", "error", err, "retry_in", d)
			sleep(ctx, d)
			continue
		case res.SinkUnavailable && r.prober != nil:
			continue // breaker.watch probes; the loop's top waits for it
		case res.SinkUnavailable:
			r.log.Debug("sink still unavailable", "retry_in", res.Backoff)
			r.sink.warn(ctx)
			sleep(ctx, res.Backoff)
			continue
		}
		dbDown.Reset()
		switch {
		case probe && res.Claimed == 0:
			sleep(ctx, r.cfg.PollInterval) // nothing to probe with yet
		case probe:
			r.sink.answered() // an answer of the message's own
		case res.Claimed == 0 && alone:
			// Nothing to publish, and no batch was published or recorded
			// meanwhile (one's rows, given back while this claim ran,
			// would be missed): an outage on trial is over, nothing
			// waits for the sink any more.
			r.sink.endTrial()
			fallthrough
		case !full:
			wait = pollWait(r.cfg, r.listener != nil, wait, res.Claimed > 0)
			r.turns.await(ctx, woken, wait)
		default:
			// A full batch: more rows likely wait. Its claim invited
			// another worker already; this one claims again at once.
			wait = pollWait(r.cfg, r.listener != nil, wait, true)
		}
	}
	return nil
}

// runOrdered is ordered loop number loop (Run starts Ordering.Loops of them): it
// serves the ordered topics until ctx ends: it leases the least recently
// served shard that has work, publishes that shard's rows in order until
// it is drained or ShardBudget rows were claimed, hands the shard back and
// leases the next. A shard is leased by one loop at a time, so the loops
// serve different shards side by side. See docs/ordering.md.
func (r *Relay) runOrdered(ctx context.Context, loop int) {
	slot := r.live.orderedSlot(loop)
	// Leasing and handing back shards outlive ctx, within the shutdown
	// bound.
	hard, stopHard := shutdownBound(ctx, r.cfg)
	defer stopHard()
	dbDown := newExponential(r.cfg.OutageBackoffMin, r.cfg.OutageBackoffMax)
	var settle settling
	for ctx.Err() == nil {
		if r.prober != nil && r.sink.isDown() {
			r.sink.await(ctx, false) // breaker.watch probes
			continue
		}
		woken := r.bell.next()
		lessee := r.tokens.next()
		lctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
		shard, ok, err := r.shards.LeaseShard(lctx, lessee)
		cancel()
		switch {
		case err != nil:
			d := min(dbDown.NextBackOff(), r.cfg.OutageBackoffMax)
			r.log.Warn("database error; retrying", "error", err, "retry_in", d)
			sleep(ctx, d)
			continue
		case !ok:
			// No shard has ready work: wait for a commit or the next poll.
			// A commit that woke us may not be ready yet, because an older
			// transaction elsewhere on the server still runs (the horizon,
			// docs/ordering.md), and its end sends no notification: after
			// a wake-up, look again soon, backing off to settleMax, for
			// one PollInterval.
			if idle(ctx, settle.wait(r.cfg.PollInterval, time.Now()), woken) {
				settle.woken(time.Now())
			}
			continue
		}
		dbDown.Reset()
		r.pipe.observe(Event{Kind: EventShardLeased, Shard: shard})
		c := &shardClaims{shards: r.shards, pipe: r.pipe, shard: shard, lessee: lessee}
		claimed, wait, abandoned := c.serve(ctx, r.orderedSizes, slot)
		if abandoned {
			// A publish may still be on its way: no other replica may
			// publish the shard's keys before the lease ends.
			r.log.Warn("publish abandoned; the shard returns when its lease ends", "shard", shard)
		} else if err := c.handBack(hard); err != nil {
			r.log.Warn("handing back shard failed; it returns when its lease ends", "shard", shard, "error", err)
		}
		r.log.Debug("shard served", "shard", shard, "claimed", claimed)
		// The loop no longer serves the shard, handed back or not.
		r.pipe.observe(Event{Kind: EventShardHandedBack, Shard: shard, Rows: claimed})
		if r.prober != nil && r.sink.isDown() {
			continue // no backoff: the loop's top waits for the sink
		}
		if wait > 0 {
			sleep(ctx, wait)
		}
	}
}

// waitReady pings the database until it answers, then checks the schema,
// each try bounded by Lease. Problems that waiting cannot fix are
// returned; the rest are logged and retried.
func (r *Relay) waitReady(ctx context.Context) error {
	b := newExponential(r.cfg.OutageBackoffMin, r.cfg.OutageBackoffMax)
	for {
		// Each try is bounded like a statement: a connection that stalls
		// (the network, a frozen server) is a try that failed, logged and
		// retried, not a wait as long as TCP keeps it.
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Lease)
		err := r.store.Ready(rctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if r.store.Fatal(err) {
			return err
		}
		d := min(b.NextBackOff(), r.cfg.OutageBackoffMax)
		r.log.Warn("database unreachable; retrying", "error", err, "retry_in", d)
		sleep(ctx, d)
	}
}
