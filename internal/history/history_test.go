package history

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// run builds a history of one ordered key "k" (topic "o") with n committed
// single-event transactions and returns the input with every event
// delivered once, in order, at one second intervals.
func run(n int) Input {
	in := Input{OrderedTopics: []string{"o"}, Before: time.Second, After: 2 * time.Second, Rows: Rows{Sent: n}}
	for i := range n {
		ev := Event{ID: fmt.Sprintf("e%d", i), Topic: "o", Key: "k", Seq: i}
		in.Txns = append(in.Txns, Txn{Events: []Event{ev}, Outcome: Committed})
		in.Deliveries = append(in.Deliveries, Delivery{EventID: ev.ID, Topic: "o", Key: "k", Offset: int64(i), Time: t0.Add(time.Duration(i) * time.Second)})
	}
	return in
}

func TestCleanRunPasses(t *testing.T) {
	rep := Check(run(5))
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if rep.Written != 5 || rep.Delivered != 5 || rep.Duplicates != 0 || rep.Records != 5 {
		t.Fatalf("unexpected counts: %s", rep.Summary())
	}
}

func TestEachBrokenPromiseIsReported(t *testing.T) {
	cases := map[string]struct {
		mutate func(*Input)
		want   string
	}{
		"lost":                  {func(in *Input) { in.Deliveries = in.Deliveries[:4] }, "1 committed events lost"},
		"rolled back delivered": {func(in *Input) { in.Txns[2].Outcome = RolledBack }, "1 events of rolled-back"},
		"foreign": {func(in *Input) {
			in.Deliveries = append(in.Deliveries, Delivery{EventID: "stranger", Topic: "o", Offset: 9})
		}, "1 records of events never written"},
		"unexplained duplicate": {func(in *Input) {
			d := in.Deliveries[1]
			d.Offset = 7
			in.Deliveries = append(in.Deliveries, d)
		}, "1 duplicates outside every fault window"},
		"reordered": {func(in *Input) {
			in.Deliveries[1].Offset, in.Deliveries[2].Offset = in.Deliveries[2].Offset, in.Deliveries[1].Offset
		}, "1 per-key order violations"},
		"split over partitions": {func(in *Input) { in.Deliveries[4].Partition = 1 }, "per-key order violations"},
		"left pending":          {func(in *Input) { in.Rows.Pending = 1 }, "1 pending"},
		"unexpected failure":    {func(in *Input) { in.Rows.Failed = 1 }, "1 failed rows, want 0"},
		"partial unknown": {func(in *Input) {
			in.Txns = append(in.Txns, Txn{Outcome: Unknown, Events: []Event{{ID: "u1", Topic: "o", Key: "k", Seq: 5}, {ID: "u2", Topic: "o", Key: "j"}}})
			in.Deliveries = append(in.Deliveries, Delivery{EventID: "u1", Topic: "o", Key: "k", Offset: 5})
		}, "1 transactions delivered in part"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			in := run(5)
			c.mutate(&in)
			err := Check(in).Err()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Err() = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestDuplicateInsideFaultWindowIsExplained(t *testing.T) {
	in := run(5)
	// Event 2 was first produced at t0+2s and again after event 4.
	d := in.Deliveries[2]
	d.Offset, d.Time = 5, t0.Add(10*time.Second)
	in.Deliveries = append(in.Deliveries, d)
	// A kill at t0+3s explains it: the first copy is within Before of it.
	in.Faults = []Window{{Kind: "kill9", Start: t0.Add(3 * time.Second), End: t0.Add(3 * time.Second)}}
	rep := Check(in)
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if rep.Duplicates != 1 || rep.DuplicatesByFault["kill9"] != 1 {
		t.Fatalf("duplicate not attributed to the kill: %s", rep.Summary())
	}
	// A fault well after the first copy does not explain it.
	in.Faults[0].Start, in.Faults[0].End = t0.Add(5*time.Second), t0.Add(6*time.Second)
	if rep := Check(in); rep.Unexplained != 1 {
		t.Fatalf("duplicate explained by a later fault: %s", rep.Summary())
	}
}

func TestUnknownOutcomeMayGoEitherWay(t *testing.T) {
	in := run(3)
	in.Txns[1].Outcome = Unknown
	rep := Check(in)
	if err := rep.Err(); err != nil || rep.UnknownDelivered != 1 {
		t.Fatalf("delivered unknown: err %v, %s", err, rep.Summary())
	}
	in.Deliveries = append(in.Deliveries[:1], in.Deliveries[2:]...)
	rep = Check(in)
	if err := rep.Err(); err != nil || rep.UnknownDelivered != 0 || rep.Lost != 0 {
		t.Fatalf("undelivered unknown: err %v, %s", err, rep.Summary())
	}
}

func TestLateDuplicateOfEarlierEventIsNotAnOrderViolation(t *testing.T) {
	in := run(3)
	d := in.Deliveries[0]
	d.Offset, d.Time = 3, t0.Add(time.Second)
	in.Deliveries = append(in.Deliveries, d)
	in.Faults = []Window{{Kind: "freeze", Start: t0, End: t0.Add(time.Second)}}
	if err := Check(in).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestUnorderedTopicsAreNotOrderChecked(t *testing.T) {
	in := run(3)
	in.OrderedTopics = nil
	in.Deliveries[0].Offset, in.Deliveries[2].Offset = 2, 0
	if err := Check(in).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestDuplicateIsAttributedToTheNearestFault(t *testing.T) {
	in := run(5)
	d := in.Deliveries[2] // first produced at t0+2s
	d.Offset = 5
	in.Deliveries = append(in.Deliveries, d)
	in.Faults = []Window{
		{Kind: "broker-slow", Start: t0.Add(-time.Second), End: t0.Add(500 * time.Millisecond)},
		{Kind: "pg-restart", Start: t0.Add(2100 * time.Millisecond), End: t0.Add(2500 * time.Millisecond)},
	}
	rep := Check(in)
	if rep.DuplicatesByFault["pg-restart"] != 1 || rep.DuplicatesByFault["broker-slow"] != 0 {
		t.Fatalf("duplicate attributed to %v, want the restart", rep.DuplicatesByFault)
	}
}

func TestRecoveryAfterOutage(t *testing.T) {
	// Ten events, one committed each second from t0 (At = t0+i s) and
	// produced 100ms later, but for those committed during an outage from
	// t0+2.5s to t0+5.5s: events 3, 4 and 5 are produced after the heal,
	// at +300ms, +500ms and +800ms. Event 2's request was stalled across
	// the heal: its only copy carries the time it was built, before it.
	heal := t0.Add(5500 * time.Millisecond)
	base := func() Input {
		in := run(10)
		for i := range in.Txns {
			in.Txns[i].At = t0.Add(time.Duration(i) * time.Second)
			in.Deliveries[i].Time = in.Txns[i].At.Add(100 * time.Millisecond)
		}
		for i, after := range map[int]time.Duration{3: 300 * time.Millisecond, 4: 500 * time.Millisecond, 5: 800 * time.Millisecond} {
			in.Deliveries[i].Time = heal.Add(after)
		}
		in.Faults = []Window{
			{Kind: "broker-slow", Start: t0, End: t0.Add(time.Second)}, // not an outage
			{Kind: "broker-down", Start: t0.Add(2500 * time.Millisecond), End: heal, Outage: true},
		}
		return in
	}

	rep := Check(base())
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	want := Recovery{Window: base().Faults[1], First: 300 * time.Millisecond, FirstSeen: true, Backlog: 3, Drained: 800 * time.Millisecond}
	if len(rep.Recoveries) != 1 || rep.Recoveries[0] != want {
		t.Fatalf("Recoveries = %+v, want [%+v]", rep.Recoveries, want)
	}
	if s := rep.Summary(); !strings.Contains(s, "broker-down first=300ms drained=800ms backlog=3") {
		t.Errorf("summary does not give the recovery: %s", s)
	}

	cases := map[string]struct {
		mutate func(*Input)
		check  func(Recovery) bool
	}{
		// Event 6, committed after the heal, is not part of the backlog
		// even when it is produced last.
		"committed after the heal": {func(in *Input) { in.Deliveries[6].Time = heal.Add(5 * time.Second) },
			func(r Recovery) bool { return r.Backlog == 3 && r.Drained == 800*time.Millisecond }},
		// Event 1, committed long before, is delivered late: it is part of
		// the backlog and the drain waits for it.
		"old event late": {func(in *Input) { in.Deliveries[1].Time = heal.Add(2 * time.Second) },
			func(r Recovery) bool { return r.Backlog == 4 && r.Drained == 2*time.Second }},
		// A duplicate produced after the heal does not put an event
		// produced before it back in the backlog, but it is the first record.
		"duplicate after the heal": {func(in *Input) {
			d := in.Deliveries[2]
			d.Offset, d.Time = 20, heal.Add(100*time.Millisecond)
			in.Deliveries = append(in.Deliveries, d)
		}, func(r Recovery) bool { return r.Backlog == 3 && r.First == 100*time.Millisecond }},
		// A lost event is counted apart and does not stretch the drain.
		"lost": {func(in *Input) { in.Deliveries = slices.Delete(in.Deliveries, 4, 5) },
			func(r Recovery) bool {
				return r.Undelivered == 1 && r.Backlog == 2 && r.Drained == 800*time.Millisecond
			}},
		// Rolled-back events are no backlog.
		"rolled back": {func(in *Input) { in.Txns[5].Outcome = RolledBack; in.Deliveries = slices.Delete(in.Deliveries, 5, 6) },
			func(r Recovery) bool { return r.Backlog == 2 && r.Drained == 500*time.Millisecond }},
		// Nothing produced after the heal.
		"nothing after": {func(in *Input) {
			in.Deliveries = in.Deliveries[:3]
			in.Txns = in.Txns[:3]
		}, func(r Recovery) bool { return !r.FirstSeen && r.Backlog == 0 && r.Drained == 0 }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			in := base()
			c.mutate(&in)
			rep := Check(in)
			if len(rep.Recoveries) != 1 || !c.check(rep.Recoveries[0]) {
				t.Fatalf("Recoveries = %+v", rep.Recoveries)
			}
		})
	}
}
