package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the report for people: the ceiling, then one line per
// run with the throughput (or latency, or idle load) and one with what it
// cost. relay-bench prints it unless --json is given.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	mysql := rep.Settings.Database == "mysql"
	if mysql {
		writeCeiling(tw, "SQL ceiling (Go: the relay's MySQL claim transaction and mark-sent on a migrated outbox table, "+rep.Settings.ServerVersion+")", rep.Ceiling)
	} else {
		writeCeiling(tw, "SQL ceiling (the claim and mark-sent or delete statements alone, on a migrated outbox table)", rep.Ceiling)
	}
	writeSinkCeiling(tw, rep.SinkCeiling)
	writeRuns(tw, rep.Mode, rep.Runs, rep.SinkCeiling != nil)
	fmt.Fprintln(tw)
	writeCosts(tw, rep.Runs, mysql)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Runs {
		if r.Steady != nil && r.Steady.Burst != nil {
			writeBurst(w, r.Relays, r.Steady.Burst)
		}
		if r.Soak != nil {
			fmt.Fprintln(w)
			if err := writeSoak(w, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeSoak prints a soak's series, one line per sample, and its verdicts.
func writeSoak(w io.Writer, r Result) error {
	s := r.Soak
	autovacuum := "on"
	if !s.Autovacuum {
		autovacuum = "OFF"
	}
	vacuum := "no VACUUM by the harness"
	if s.VacuumEveryS > 0 {
		vacuum = fmt.Sprintf("VACUUM (ANALYZE) by the harness every %gs, took p50/p99 %s ms", s.VacuumEveryS, percentileCell(s.Vacuum, "%.0f"))
	}
	fmt.Fprintf(w, "soak, %d relays: retention %gs, janitor every %gs, a sample every %gs (window columns: since the previous sample); autovacuum %s, %s\n",
		r.Relays, s.RetentionS, s.JanitorIntervalS, s.SampleEveryS, autovacuum, vacuum)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "elapsed s\tsize MB\ttable MB\tindexes MB\tlive\tdead\tautovacuums\tvacuums\tpending\tsent\t"+
		"janitor total deleted\tjanitor runs\tclaim p50/p99 ms\te2e p50/p99 ms\twritten\treceived\toldest xact s\t")
	for _, x := range s.Samples {
		deleted := "-"
		if x.Janitor != nil {
			deleted = fmt.Sprint(x.Janitor.TotalDeleted)
		}
		cells := []string{fmt.Sprintf("%.0f", x.ElapsedS), fmt.Sprintf("%.2f", mb(x.SizeBytes)), fmt.Sprintf("%.2f", mb(x.TableBytes)),
			fmt.Sprintf("%.2f", mb(x.IndexesBytes)), fmt.Sprint(x.LiveTuples), fmt.Sprint(x.DeadTuples), fmt.Sprint(x.Autovacuums), fmt.Sprint(x.Vacuums),
			optionalInt(x.Pending), optionalInt(x.Sent), deleted, fmt.Sprint(x.JanitorRuns),
			percentileCell(x.Claim, "%.2f"), percentileCell(x.Latency, "%.1f"), fmt.Sprint(x.Written), fmt.Sprint(x.Received),
			fmt.Sprintf("%.1f", x.OldestXactS)}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	claim := "claim p50: no windows to compare"
	if s.ClaimP50Ratio != nil {
		claim = fmt.Sprintf("claim p50 x%.2f, p99 x%s from window %.0f-%.0fs (the first from warm-up, %gs, on) to window %.0f-%.0fs: within %gx %v",
			*s.ClaimP50Ratio, optional(s.ClaimP99Ratio, "%.2f"), s.ClaimFirstWindowS[0], s.ClaimFirstWindowS[1], s.WarmupS,
			s.ClaimLastWindowS[0], s.ClaimLastWindowS[1], ClaimTolerance, s.ClaimWithin2x)
	}
	_, err := fmt.Fprintf(w, "size x%s over the second half (from %.0fs); %.2f -> %.2f MB over the last third (from %.0fs): leveled %v\n"+
		"dead tuples peak %d in the middle third, %d in the last third: leveled %v; slope over the second half %s/min\n"+
		"%s\nleveled (size and dead-tuple peaks within %gx over the last third): %v\n",
		optional(s.SizeGrowthSecondHalf, "%.2f"), s.HalfS, mb(s.SizeLastThirdStart), mb(s.SizeLast), s.LastThirdS, s.SizeLeveled,
		s.DeadTuplesPeakMiddleThird, s.DeadTuplesPeakLastThird, s.DeadTuplesLeveled, optional(s.DeadTuplesSlopePerMin, "%.0f"),
		claim, LevelTolerance, s.Leveled)
	return err
}

func writeCeiling(w io.Writer, title string, rows []CeilingResult) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "%s\n", title)
	phases := rows[0].Phases != nil
	head := "lifecycle\tclients\trows\tbatch\tevents/s\thost CPU busy\t"
	if phases {
		head += "lock p50 ms (share)\tlease\tread\tcommit\tmark-sent\t"
	}
	fmt.Fprintln(w, head)
	for _, c := range rows {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%.0f\t%s\t", c.Lifecycle, c.Clients, c.Rows, c.Batch, c.EventsPerSecond, busyCell(c.HostCPUBusy))
		if p := c.Phases; p != nil {
			for _, t := range []PhaseTiming{p.Lock, p.Lease, p.Read, p.Commit, p.MarkSent} {
				fmt.Fprintf(w, "%s (%.0f%%)\t", percentileP50(t.MS), t.Share*100)
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

// busyCell prints a host CPU share as a percentage, or "-".
func busyCell(busy *float64) string {
	if busy == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", *busy*100)
}

// writeSinkCeiling prints the sink ceiling, when there is one.
func writeSinkCeiling(w io.Writer, c *SinkCeilingResult) {
	if c == nil {
		return
	}
	fmt.Fprintf(w, "%s sink ceiling (its publisher alone, no database: the same events, %d batches at a time)\n", c.Sink, c.Workers)
	fmt.Fprintf(w, "sink\tbatch\tevents\tseconds\tevents/s\tbatch p50/p99 ms\thost CPU busy\t\n")
	fmt.Fprintf(w, "%s\t%d\t%d\t%.2f\t%.0f\t%s\t%s\t\n", c.Sink, c.Batch, c.Events, c.Seconds, c.EventsPerSecond, percentileCell(c.Publish, "%.2f"), busyCell(c.HostCPUBusy))
	fmt.Fprintln(w)
}

// writeRuns prints one line per run; withSink adds the ratio to the sink
// ceiling after the SQL ceiling's.
func writeRuns(w io.Writer, mode Mode, runs []Result, withSink bool) {
	head := []string{"mode", "relays", "batch", "events", "seconds", "events/s", "x ceiling", "dups", "missing", "relay warnings"}
	if withSink {
		head = slices.Insert(head, 7, "x sink ceiling")
	}
	switch mode {
	case ModeSteady, ModeSoak:
		head = append(head, "target/s", "lat p50 ms", "p95", "p99", "max", "commit p50/p99 ms", "late writes")
	case ModeIdle:
		head = append(head, "db xact/s", "relay claims/s", "relay statements/s")
	}
	fmt.Fprintln(w, strings.Join(head, "\t")+"\t")
	for _, r := range runs {
		cells := []string{string(r.Mode), fmt.Sprint(r.Relays), fmt.Sprint(r.BatchSize), fmt.Sprint(r.Events),
			fmt.Sprintf("%.2f", r.Seconds), fmt.Sprintf("%.0f", r.EventsPerSecond), optional(r.CeilingRatio, "%.2f"),
			fmt.Sprint(r.Duplicates), fmt.Sprint(r.Missing), fmt.Sprint(r.RelayWarnings)}
		if withSink {
			cells = slices.Insert(cells, 7, optional(r.SinkCeilingRatio, "%.2f"))
		}
		if s := r.Steady; s != nil {
			cells = append(cells, fmt.Sprint(s.TargetRate))
			cells = append(cells, percentileCells(s.Latency, "%.1f")...)
			cells = append(cells, percentileCell(s.Commit, "%.2f"), fmt.Sprint(s.LateWrites))
		}
		if i := r.Idle; i != nil {
			cells = append(cells, fmt.Sprintf("%.1f", i.DBXactPerSecond), optional(i.ClaimsPerSecond, "%.1f"), optional(i.StatementsPerSecond, "%.1f"))
		}
		fmt.Fprintln(w, strings.Join(cells, "\t")+"\t")
	}
}

// writeCosts prints what each run cost; on MySQL the dead tuple and
// autovacuum counts, which are PostgreSQL's, are "-".
func writeCosts(w io.Writer, runs []Result, mysql bool) {
	fmt.Fprintln(w, "relays\trelay cpu s\tpeak rss MB\tdb backend cpu s\tbroker cpu s\thost busy\t"+
		"claim p50/p99 ms\tpublish p50/p99 ms\trecord p50/p99 ms\tbatch cycle p50/p99 ms\tdead tuples before/after\tsize MB before/after\tautovacuums\toldest xact s\t")
	for _, r := range runs {
		busy := "-"
		if r.HostCPUBusy != nil {
			busy = fmt.Sprintf("%.0f%% of %d", *r.HostCPUBusy*100, r.CPUs)
		}
		claim := percentileCell(r.Claim, "%.2f")
		if r.ClaimSource == "pg_stat_activity" {
			claim += " (sampled)"
		}
		cells := []string{fmt.Sprint(r.Relays), fmt.Sprintf("%.2f", r.RelayCPUSeconds), fmt.Sprintf("%.1f", r.RelayPeakRSSMB),
			optional(r.DBBackendCPUSeconds, "%.2f"), optional(r.BrokerCPUSeconds, "%.2f"), busy,
			claim, percentileCell(r.Publish, "%.2f"), percentileCell(r.Record, "%.2f"), percentileCell(r.BatchCycle, "%.1f"),
			fmt.Sprintf("%d/%d", r.Table.DeadTuplesBefore, r.Table.DeadTuplesAfter),
			fmt.Sprintf("%.1f/%.1f", mb(r.Table.SizeBeforeBytes), mb(r.Table.SizeAfterBytes)),
			fmt.Sprint(r.Table.Autovacuums), optional(r.OldestXactSeconds, "%.1f")}
		if mysql {
			cells[10], cells[12] = "-", "-"
		}
		fmt.Fprintln(w, strings.Join(cells, "\t")+"\t")
	}
}

// percentileP50 is the p50, or "-".
func percentileP50(p *Percentiles) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", p.P50)
}

// percentileCell is "p50/p99", or "-".
func percentileCell(p *Percentiles, format string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf(format+"/"+format, p.P50, p.P99)
}

// percentileCells is p50, p95, p99 and max in their own cells.
func percentileCells(p *Percentiles, format string) []string {
	if p == nil {
		return []string{"-", "-", "-", "-"}
	}
	return []string{fmt.Sprintf(format, p.P50), fmt.Sprintf(format, p.P95), fmt.Sprintf(format, p.P99), fmt.Sprintf(format, p.Max)}
}

func optionalInt(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

func optional(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// writeBurst prints a steady run's burst.
func writeBurst(w io.Writer, relays int, b *BurstStats) {
	fmt.Fprintf(w, "\nburst, %d relays: %d events committed at %.1fs (written in %.2fs), all sent %.2fs after their commit (%.0f events/s)\n",
		relays, b.Events, b.AtS, b.WriteS, b.DrainS, float64(b.Events)/max(b.DrainS, 1e-9))
	fmt.Fprintf(w, "steady events' latency p50/p99/max ms, by commit: before %s, during %s, after %s\n",
		burstCell(b.Before), burstCell(b.During), burstCell(b.After))
}

func burstCell(p *Percentiles) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f/%.1f/%.1f (%d events)", p.P50, p.P99, p.Max, p.N)
}

// summaryLine is the progress line at the end of a run.
func summaryLine(r Result) string {
	switch r.Mode {
	case ModeSteady, ModeSoak:
		lat := "no events received"
		if s := r.Steady; s != nil && s.Latency != nil {
			lat = fmt.Sprintf("latency p50 %.1f ms, p99 %.1f ms", s.Latency.P50, s.Latency.P99)
		}
		return fmt.Sprintf("%d events at %.0f/s, %s, %d missing, %d duplicates", r.Events, r.EventsPerSecond, lat, r.Missing, r.Duplicates)
	case ModeIdle:
		if r.Idle != nil {
			return fmt.Sprintf("%s relay claims/s, %.1f database transactions/s", optional(r.Idle.ClaimsPerSecond, "%.1f"), r.Idle.DBXactPerSecond)
		}
	}
	return fmt.Sprintf("%d events in %.2fs, %.0f events/s, %d missing, %d duplicates", r.Events, r.Seconds, r.EventsPerSecond, r.Missing, r.Duplicates)
}
