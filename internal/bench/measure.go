package bench

import (
	"context"
	"runtime"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// runner is one run in progress: a mode with some relays.
type runner struct {
	*harness
	table  outbox.Table
	topic  string
	relays int
	res    *Result

	before  tableHealth
	procs   *relaySet
	sampler *sampler
	cpu     cpuReading
}

// cpuReading is a reading of the host's and the broker's CPU counters.
type cpuReading struct {
	hostBusy, hostTotal uint64
	hostOK              bool
	broker              float64
	brokerOK            bool
}

// hostBusyBetween is the share of the host's CPUs busy between two
// readings, or nil when either could not be taken.
func hostBusyBetween(start, end cpuReading) *float64 {
	if !start.hostOK || !end.hostOK || end.hostTotal <= start.hostTotal {
		return nil
	}
	busy := float64(end.hostBusy-start.hostBusy) / float64(end.hostTotal-start.hostTotal)
	return &busy
}

// hostReading reads the host's CPU counters only.
func hostReading() cpuReading {
	var c cpuReading
	c.hostBusy, c.hostTotal, c.hostOK = hostCPU()
	return c
}

func (r *runner) readCPU() cpuReading {
	c := hostReading()
	if r.sink.broker != nil {
		c.broker, c.brokerOK = r.sink.broker.cpu()
	}
	return c
}

// recordBefore reads the table's health before the relays start.
func (r *runner) recordBefore(ctx context.Context) error {
	var err error
	r.before, err = readTableHealth(ctx, r.pool, r.table)
	return err
}

// startRelays starts the run's relays and the CPU accounting; the
// pg_stat_activity sampler starts separately (startSampler), when the
// mode's measured window begins. After it, defer abort for the error paths
// and call stopRelays on the good one.
func (r *runner) startRelays() error {
	procs, err := startRelays(r.cfg, r.sink, r.relays)
	if err != nil {
		return err
	}
	r.procs, r.cpu = procs, r.readCPU()
	return nil
}

// startSampler starts sampling the relays' statements.
func (r *runner) startSampler(ctx context.Context) {
	r.sampler = startSampler(ctx, r.pool, r.procs.appNames(), r.cfg.SampleInterval)
}

// abort kills the relays if stopRelays did not run; for error paths.
func (r *runner) abort() {
	if r.procs != nil {
		if r.sampler != nil {
			r.sampler.finish()
		}
		r.procs.kill()
		r.procs = nil
	}
}

// stopRelays stops the sampler and the relays, waits until their backends
// are gone, and fills the Result's resource, event and warning fields.
func (r *runner) stopRelays(ctx context.Context) error {
	var smp samples
	if r.sampler != nil {
		smp = r.sampler.finish()
	}
	names := r.procs.appNames()
	dbCPU := r.backendCPU(ctx, names)
	end := r.readCPU()
	usage, err := r.procs.stop(r.cfg.BatchSize)
	r.procs = nil
	if r.pool != nil { // PostgreSQL's pg_stat_activity names the relays' backends
		if gerr := awaitBackendsGone(ctx, r.pool, names); err == nil {
			err = gerr
		}
	}
	r.fillUsage(usage, smp, dbCPU, end)
	return err
}

// backendCPU sums the CPU time of the relays' backends, while they live.
func (r *runner) backendCPU(ctx context.Context, appNames []string) *float64 {
	if !r.localDB || r.pool == nil {
		return nil
	}
	pids, err := backendPIDs(ctx, r.pool, appNames)
	if err != nil || len(pids) == 0 {
		return nil
	}
	total := 0.0
	for _, pid := range pids {
		s, ok := procCPU(pid)
		if !ok {
			return nil
		}
		total += s
	}
	return &total
}

func (r *runner) fillUsage(u relayUsage, smp samples, dbCPU *float64, end cpuReading) {
	res, start := r.res, r.cpu
	res.RelayCPUSeconds = u.cpuSeconds
	res.RelayPeakRSSMB = float64(u.peakRSS) / (1 << 20)
	res.PerRelay = u.perRelay
	res.DBBackendCPUSeconds = dbCPU
	res.CPUs = runtime.NumCPU()
	res.HostCPUBusy = hostBusyBetween(start, end)
	if start.brokerOK && end.brokerOK {
		b := end.broker - start.broker
		res.BrokerCPUSeconds = &b
	}
	res.Batches, res.RelayWarningMessages = u.events.batches, u.warnings
	for _, n := range u.warnings {
		res.RelayWarnings += n
	}
	res.BatchCycle = percentilesOf(u.events.cycleMS)
	res.Publish, res.Record = percentilesOf(u.events.publishMS), percentilesOf(u.events.recordMS)
	switch {
	case len(u.events.claimMS) > 0:
		res.Claim, res.ClaimSource = percentilesOf(u.events.claimMS), "observer"
	case len(smp.claimMS) > 0:
		res.Claim, res.ClaimSource = percentilesOf(smp.claimMS), "pg_stat_activity"
	}
	res.MarkSent = percentilesOf(smp.markSentMS)
	if smp.enabled {
		res.OldestXactSeconds = &smp.oldestXact
	}
}

// recordAfter reads the table's health after the relays exited.
func (r *runner) recordAfter(ctx context.Context) error {
	after, err := readTableHealth(ctx, r.pool, r.table)
	if err != nil {
		return err
	}
	r.res.Table = TableStats{
		DeadTuplesBefore: r.before.deadTuples, DeadTuplesAfter: after.deadTuples,
		SizeBeforeBytes: r.before.size, SizeAfterBytes: after.size,
		Autovacuums: after.autovacuums - r.before.autovacuums,
	}
	return nil
}
