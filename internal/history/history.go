// Package history is the fault runs' independent delivery checker. It
// compares what a producer knows it committed with what a consumer read back
// from the broker, in the manner of Jepsen's histories: the producer records
// every transaction it attempted and how it ended (committed, rolled back,
// or unknown when the commit's answer was lost), the consumer records every
// record it received, and Check derives lost events, delivered rolled-back
// events, duplicates (each matched to a fault window or reported as
// unexplained), per-key order violations, and, for each sink outage, how
// long delivery took to resume after it.
//
// The checker reads nothing from the relay or the outbox table except the
// final row counts the caller passes in, so a relay bug cannot hide itself
// by also corrupting the evidence.
package history

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Outcome is how a producer's transaction ended, as the producer saw it.
type Outcome int

const (
	// Committed: COMMIT returned success. Every event must be delivered.
	Committed Outcome = iota + 1
	// RolledBack: the producer rolled back (or never committed). No event
	// may be delivered.
	RolledBack
	// Unknown: COMMIT returned an error, e.g. the connection broke while
	// the server was restarting, so the transaction may or may not have
	// committed. Its events may be delivered, or not, but not partly.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case Committed:
		return "committed"
	case RolledBack:
		return "rolled back"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Event is one event a producer wrote.
type Event struct {
	// ID is the event's id, which the relay sends as the outbox-event-id
	// header.
	ID string
	// Topic and Key are where the event was written.
	Topic, Key string
	// Seq is the event's position among the writes of its key: a key's
	// events are written by one producer, one transaction after another,
	// so Seq order is write order.
	Seq int
}

// Txn is one transaction a producer attempted.
type Txn struct {
	Events  []Event
	Outcome Outcome
	// At is when the producer learned the outcome (COMMIT or ROLLBACK
	// returned). Recoveries use it to tell which events were committed
	// before an outage ended.
	At time.Time
}

// Delivery is one record a consumer received.
type Delivery struct {
	// EventID is the record's outbox-event-id header (or the sink's field
	// for it).
	EventID string
	// Topic, Key and Partition locate the record; Offset orders it within
	// its partition. A sink without partitions leaves Partition 0 and
	// orders its records by their place in the destination: a stream's
	// sequence, a queue's delivery order, a receiver's arrival order.
	Topic, Key string
	Partition  int
	Offset     int64
	// Time is the record's timestamp: when it was produced (Kafka's
	// CreateTime), or, for a sink that keeps no producer's time, when the
	// broker stored it or the consumer received it.
	Time time.Time
}

// Window is the time span of one injected fault.
type Window struct {
	Kind, Target string
	Start, End   time.Time
	// Outage marks a fault that cut every relay off from the sink (the
	// broker down or stalled) and healed at End: Check reports how
	// delivery recovered after it (Report.Recoveries).
	Outage bool
}

// Rows are the outbox table's row counts by status once the run drained.
type Rows struct {
	Pending, Processing, Sent, Failed int
}

// Input is everything Check compares.
type Input struct {
	Txns       []Txn
	Deliveries []Delivery
	Faults     []Window
	// OrderedTopics are the topics whose keys must be delivered in write
	// order (first copies; a later duplicate of an earlier event is
	// allowed).
	OrderedTopics []string
	// Before and After widen each fault window when duplicates are
	// matched to faults: a duplicate is explained when its first copy was
	// produced between Start-Before and End+After of some window (a relay
	// published and was then cut off before recording it, or its publish
	// outlived the fault and was recorded too late).
	Before, After time.Duration
	// Rows are the table's final counts.
	Rows Rows
	// ExpectFailed is the number of rows the run made fail on purpose
	// (malformed rows inserted by hand); Rows.Failed must equal it.
	ExpectFailed int
}

// Report is Check's verdict. The lists hold event ids, at most a sample.
type Report struct {
	Txns, CommittedTxns, RolledBackTxns, UnknownTxns int
	// Written is the number of events in committed transactions; Unknown
	// the number in transactions whose outcome is unknown, of which
	// UnknownDelivered arrived.
	Written, Unknown, UnknownDelivered int
	// Records is every record received; Delivered the distinct events.
	Records, Delivered int
	Lost               int
	LostSample         []string
	// RolledBackDelivered counts events of rolled-back transactions that
	// arrived; Foreign, records whose event the producer never wrote.
	RolledBackDelivered, Foreign int
	ForeignSample                []string
	// PartialUnknown counts unknown-outcome transactions of which some but
	// not all events arrived: a transaction is atomic either way.
	PartialUnknown int
	// Duplicates is Records - Delivered; DuplicatesByFault attributes each
	// duplicated event to the first fault window that explains it.
	Duplicates        int
	DuplicatesByFault map[string]int
	Unexplained       int
	UnexplainedSample []string
	// OrderViolations counts first copies that arrived after a later
	// write of the same key, in ordered topics.
	OrderViolations int
	OrderSample     []string
	// Recoveries has one entry per outage window, in the order of Faults.
	// They are measurements, not promises: Err ignores them.
	Recoveries   []Recovery
	Rows         Rows
	ExpectFailed int
}

const sampleSize = 5

func sample(list []string, s string) []string {
	if len(list) < sampleSize {
		return append(list, s)
	}
	return list
}

// Check compares the producer's history with the consumer's deliveries.
func Check(in Input) Report {
	rep := Report{Txns: len(in.Txns), Rows: in.Rows, ExpectFailed: in.ExpectFailed, DuplicatesByFault: map[string]int{}}
	type written struct {
		ev  Event
		txn int
	}
	events := map[string]written{}
	for i, tx := range in.Txns {
		switch tx.Outcome {
		case Committed:
			rep.CommittedTxns++
			rep.Written += len(tx.Events)
		case RolledBack:
			rep.RolledBackTxns++
		case Unknown:
			rep.UnknownTxns++
			rep.Unknown += len(tx.Events)
		}
		for _, ev := range tx.Events {
			events[ev.ID] = written{ev, i}
		}
	}

	// Copies per event, in production order.
	copies := map[string][]Delivery{}
	for _, d := range in.Deliveries {
		rep.Records++
		w, ok := events[d.EventID]
		if !ok {
			rep.Foreign++
			rep.ForeignSample = sample(rep.ForeignSample, fmt.Sprintf("%s (%s/%d@%d)", d.EventID, d.Topic, d.Partition, d.Offset))
			continue
		}
		if in.Txns[w.txn].Outcome == RolledBack {
			if len(copies[d.EventID]) == 0 {
				rep.RolledBackDelivered++
			}
		}
		copies[d.EventID] = append(copies[d.EventID], d)
	}
	rep.Delivered = len(copies)
	rep.Duplicates = rep.Records - rep.Foreign - rep.Delivered

	// Lost events, and unknown transactions delivered in part.
	for _, tx := range in.Txns {
		got := 0
		for _, ev := range tx.Events {
			if len(copies[ev.ID]) > 0 {
				got++
			} else if tx.Outcome == Committed {
				rep.Lost++
				rep.LostSample = sample(rep.LostSample, ev.ID)
			}
		}
		if tx.Outcome == Unknown {
			rep.UnknownDelivered += got
			if got > 0 && got < len(tx.Events) {
				rep.PartialUnknown++
			}
		}
	}

	// Duplicates, each matched to a fault window.
	ids := make([]string, 0, len(copies))
	for id := range copies {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		cs := copies[id]
		if len(cs) < 2 {
			continue
		}
		first := slices.MinFunc(cs, func(a, b Delivery) int { return a.Time.Compare(b.Time) }).Time
		if w, ok := nearest(in.Faults, first, in.Before, in.After); ok {
			rep.DuplicatesByFault[w.Kind] += len(cs) - 1
		} else {
			rep.Unexplained += len(cs) - 1
			rep.UnexplainedSample = sample(rep.UnexplainedSample,
				fmt.Sprintf("%s x%d first produced %s", id, len(cs), first.Format("15:04:05.000")))
		}
	}

	// Per-key order in ordered topics: each key's first copies, in the
	// order the consumer reads them, must follow write order.
	ordered := map[string]bool{}
	for _, t := range in.OrderedTopics {
		ordered[t] = true
	}
	type slot struct {
		topic, key string
	}
	byKey := map[slot][]Delivery{}
	for _, id := range ids {
		w := events[id]
		if !ordered[w.ev.Topic] {
			continue
		}
		first := slices.MinFunc(copies[id], func(a, b Delivery) int {
			return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
		})
		s := slot{w.ev.Topic, w.ev.Key}
		byKey[s] = append(byKey[s], first)
	}
	for s, ds := range byKey {
		slices.SortFunc(ds, func(a, b Delivery) int {
			return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
		})
		if ds[0].Partition != ds[len(ds)-1].Partition {
			rep.OrderViolations++
			rep.OrderSample = sample(rep.OrderSample, fmt.Sprintf("%s/%s spread over partitions %d and %d", s.topic, s.key, ds[0].Partition, ds[len(ds)-1].Partition))
			continue
		}
		last := -1
		for _, d := range ds {
			seq := events[d.EventID].ev.Seq
			if seq < last {
				rep.OrderViolations++
				rep.OrderSample = sample(rep.OrderSample, fmt.Sprintf("%s/%s: write %d arrived after write %d", s.topic, s.key, seq, last))
			}
			last = max(last, seq)
		}
	}
	rep.Recoveries = recoveries(in, copies)
	return rep
}

// nearest returns the fault window closest to t among those whose span,
// widened by before and after, contains it.
func nearest(faults []Window, t time.Time, before, after time.Duration) (Window, bool) {
	var best Window
	bestDist, found := time.Duration(0), false
	for _, w := range faults {
		if t.Before(w.Start.Add(-before)) || t.After(w.End.Add(after)) {
			continue
		}
		var dist time.Duration
		switch {
		case t.Before(w.Start):
			dist = w.Start.Sub(t)
		case t.After(w.End):
			dist = t.Sub(w.End)
		}
		if !found || dist < bestDist {
			best, bestDist, found = w, dist, true
		}
	}
	return best, found
}

// DuplicateRatio is duplicates per delivered event.
func (r Report) DuplicateRatio() float64 {
	if r.Delivered == 0 {
		return 0
	}
	return float64(r.Duplicates) / float64(r.Delivered)
}

// Err returns nil when the run kept every promise, otherwise an error
// listing each broken one.
func (r Report) Err() error {
	var errs []error
	if r.Lost > 0 {
		errs = append(errs, fmt.Errorf("%d committed events lost, e.g. %v", r.Lost, r.LostSample))
	}
	if r.RolledBackDelivered > 0 {
		errs = append(errs, fmt.Errorf("%d events of rolled-back transactions delivered", r.RolledBackDelivered))
	}
	if r.Foreign > 0 {
		errs = append(errs, fmt.Errorf("%d records of events never written, e.g. %v", r.Foreign, r.ForeignSample))
	}
	if r.PartialUnknown > 0 {
		errs = append(errs, fmt.Errorf("%d transactions delivered in part", r.PartialUnknown))
	}
	if r.Unexplained > 0 {
		errs = append(errs, fmt.Errorf("%d duplicates outside every fault window, e.g. %v", r.Unexplained, r.UnexplainedSample))
	}
	if r.OrderViolations > 0 {
		errs = append(errs, fmt.Errorf("%d per-key order violations, e.g. %v", r.OrderViolations, r.OrderSample))
	}
	if r.Rows.Pending+r.Rows.Processing > 0 {
		errs = append(errs, fmt.Errorf("rows left after the drain: %d pending, %d processing", r.Rows.Pending, r.Rows.Processing))
	}
	if r.Rows.Failed != r.ExpectFailed {
		errs = append(errs, fmt.Errorf("%d failed rows, want %d (the malformed rows inserted on purpose)", r.Rows.Failed, r.ExpectFailed))
	}
	return errors.Join(errs...)
}

// Summary is the report on one line.
func (r Report) Summary() string {
	var byFault []string
	for k, n := range r.DuplicatesByFault {
		byFault = append(byFault, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(byFault)
	return fmt.Sprintf("txns=%d (committed %d, rolled back %d, unknown %d) written=%d delivered=%d lost=%d rolled_back_delivered=%d "+
		"unknown_delivered=%d/%d duplicates=%d (%.2f%%; by fault: %s; unexplained %d) order_violations=%d "+
		"rows: pending=%d processing=%d sent=%d failed=%d (expected %d) recovery after outages: %s",
		r.Txns, r.CommittedTxns, r.RolledBackTxns, r.UnknownTxns, r.Written, r.Delivered, r.Lost, r.RolledBackDelivered,
		r.UnknownDelivered, r.Unknown, r.Duplicates, 100*r.DuplicateRatio(), strings.Join(byFault, " "), r.Unexplained,
		r.OrderViolations, r.Rows.Pending, r.Rows.Processing, r.Rows.Sent, r.Rows.Failed, r.ExpectFailed, recoverySummary(r.Recoveries))
}
