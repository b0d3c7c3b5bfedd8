package history

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Recovery is how delivery resumed after one sink outage (a Window with
// Outage set), measured from the heal (the window's End).
//
// Times come from the records: a record's Time is when its producer built
// the produce request. A request that was stalled across the heal and
// appended when it ended therefore counts as produced before the heal, and
// its events are not part of the backlog.
type Recovery struct {
	Window Window
	// First is the time from the heal to the first record produced after
	// it; FirstSeen is false when no record was.
	First     time.Duration
	FirstSeen bool
	// Backlog is the number of events committed before the heal of which
	// no copy had been produced by then.
	Backlog int
	// Drained is the time from the heal until every event committed before
	// it had been produced (the latest first copy in the backlog); 0 when
	// the backlog was empty.
	Drained time.Duration
	// Undelivered counts events committed before the heal that never
	// arrived (lost; the report counts them as such too). Drained leaves
	// them out.
	Undelivered int
}

func (r Recovery) String() string {
	first := "no record produced after it"
	if r.FirstSeen {
		first = "first record produced " + r.First.Round(time.Millisecond).String() + " after the heal"
	}
	drained := "nothing waiting at the heal"
	if r.Backlog > 0 {
		drained = fmt.Sprintf("backlog of %d events drained %s after the heal", r.Backlog, r.Drained.Round(time.Millisecond))
	}
	s := fmt.Sprintf("%s (%s) healed at %s after %s: %s; %s", r.Window.Kind, r.Window.Target,
		r.Window.End.Format("15:04:05.000"), r.Window.End.Sub(r.Window.Start).Round(time.Millisecond), first, drained)
	if r.Undelivered > 0 {
		s += fmt.Sprintf(" (%d never delivered)", r.Undelivered)
	}
	return s
}

// short is the recovery in a few words, for the summary line.
func (r Recovery) short() string {
	first := "none"
	if r.FirstSeen {
		first = r.First.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%s first=%s drained=%s backlog=%d", r.Window.Kind, first, r.Drained.Round(time.Millisecond), r.Backlog)
}

// recoveries measures, for each outage window of in.Faults, the time from
// its heal to the first record produced after it and to the moment every
// event committed before the heal had been produced. copies holds each
// delivered event's records.
func recoveries(in Input, copies map[string][]Delivery) []Recovery {
	var out []Recovery
	times := make([]time.Time, 0, len(in.Deliveries))
	for _, d := range in.Deliveries {
		times = append(times, d.Time)
	}
	slices.SortFunc(times, time.Time.Compare)
	firstCopy := make(map[string]time.Time, len(copies))
	for id, cs := range copies {
		firstCopy[id] = slices.MinFunc(cs, func(a, b Delivery) int { return a.Time.Compare(b.Time) }).Time
	}
	for _, w := range in.Faults {
		if !w.Outage {
			continue
		}
		heal := w.End
		r := Recovery{Window: w}
		if i, _ := slices.BinarySearchFunc(times, heal, time.Time.Compare); i < len(times) {
			r.First, r.FirstSeen = times[i].Sub(heal), true
		}
		for _, tx := range in.Txns {
			if tx.Outcome != Committed || !tx.At.Before(heal) {
				continue
			}
			for _, ev := range tx.Events {
				first, ok := firstCopy[ev.ID]
				if !ok {
					r.Undelivered++
					continue
				}
				if first.Before(heal) {
					continue
				}
				r.Backlog++
				r.Drained = max(r.Drained, first.Sub(heal))
			}
		}
		out = append(out, r)
	}
	return out
}

// recoverySummary is the recoveries in a few words each.
func recoverySummary(rs []Recovery) string {
	if len(rs) == 0 {
		return "none"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.short()
	}
	return strings.Join(parts, "; ")
}
