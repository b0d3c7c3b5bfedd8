package bench

import (
	"bufio"
	"encoding/json"
	"io"
	"sort"
	"sync"
	"time"
)

// The relays report what they do through their observer: `relay run
// --observe-file` writes each relay.Event as a JSON line (the form is
// documented in cmd/relay/observe.go). Each relay's file is a pipe to the
// harness (observeFD).

// observeLine is the part of an observe-file line the harness reads.
type observeLine struct {
	Time       time.Time `json:"time"`
	Kind       string    `json:"kind"`
	Rows       *int      `json:"rows"`
	DurationMS *float64  `json:"duration_ms"`
	Result     *struct {
		Claimed int `json:"claimed"`
		Sent    int `json:"sent"`
	} `json:"result"`
	Events int64 `json:"events"` // of a "dropped" line
}

// The kinds of line the harness reads; it skips the others.
const (
	kindStarted    = "started"     // the relay's first claim ran: it serves
	kindClaimed    = "claimed"     // a claim statement: rows, duration_ms
	kindPublished  = "published"   // a batch handed to the sink: duration_ms
	kindRecorded   = "recorded"    // a batch's outcome written: duration_ms, result
	kindJanitorRan = "janitor_ran" // a retention run: rows deleted
	kindDropped    = "dropped"     // events the relay could not write: events
)

// claimEvent is a claim statement that took rows.
type claimEvent struct {
	at time.Time
	ms float64
}

// recordEvent is a batch whose outcome was recorded.
type recordEvent struct {
	at            time.Time
	claimed, sent int
	ms            float64
}

// janitorEvent is a retention run: a run of the janitor that held the job.
type janitorEvent struct {
	at      time.Time
	deleted int64
}

// relayEvents collects the observer events of one relay.
type relayEvents struct {
	started   chan struct{} // closed at the started line
	startOnce sync.Once

	mu sync.Mutex
	// claims are the claim statements that took rows (an empty claim is
	// a poll, not part of a batch).
	claims    []claimEvent
	publishMS []float64
	records   []recordEvent
	janitor   []janitorEvent
	// dropped counts the events the relay could not write; unreadable the
	// lines that did not decode (the last one of a killed relay, say).
	dropped, unreadable int
}

func newRelayEvents() *relayEvents {
	return &relayEvents{started: make(chan struct{})}
}

// consume reads r until EOF.
func (ev *relayEvents) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		ev.add(sc.Bytes())
	}
}

func (ev *relayEvents) add(raw []byte) {
	var l observeLine
	err := json.Unmarshal(raw, &l)
	ev.mu.Lock()
	defer ev.mu.Unlock()
	switch {
	case err != nil:
		ev.unreadable++
	case l.Kind == kindStarted:
		ev.startOnce.Do(func() { close(ev.started) })
	case l.Kind == kindClaimed && l.Rows != nil && *l.Rows > 0 && l.DurationMS != nil:
		ev.claims = append(ev.claims, claimEvent{at: l.Time, ms: *l.DurationMS})
	case l.Kind == kindPublished && l.DurationMS != nil:
		ev.publishMS = append(ev.publishMS, *l.DurationMS)
	case l.Kind == kindRecorded && l.Result != nil && l.DurationMS != nil:
		ev.records = append(ev.records, recordEvent{at: l.Time, claimed: l.Result.Claimed, sent: l.Result.Sent, ms: *l.DurationMS})
	case l.Kind == kindJanitorRan && l.Rows != nil:
		ev.janitor = append(ev.janitor, janitorEvent{at: l.Time, deleted: int64(*l.Rows)})
	case l.Kind == kindDropped:
		ev.dropped += int(l.Events)
	}
}

// sentCount returns the rows the relay reported sent.
func (ev *relayEvents) sentCount() (sent int) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, b := range ev.records {
		sent += b.sent
	}
	return sent
}

// batchCount returns the batches recorded and the rows they claimed.
func (ev *relayEvents) batchCount() (batches, claimed int) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, b := range ev.records {
		claimed += b.claimed
	}
	return len(ev.records), claimed
}

// Messages under which the harness counts, among the relays' warnings,
// the events it did not get.
const (
	msgEventsDropped    = "observe file: events dropped (the relay could not write them fast enough)"
	msgEventsUnreadable = "observe file: lines that did not decode"
)

// addWarnings adds the events ev lacks to counts (made if nil) and returns
// it: figures drawn from ev are incomplete.
func (ev *relayEvents) addWarnings(counts map[string]int) map[string]int {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for msg, n := range map[string]int{msgEventsDropped: ev.dropped, msgEventsUnreadable: ev.unreadable} {
		if n == 0 {
			continue
		}
		if counts == nil {
			counts = map[string]int{}
		}
		counts[msg] += n
	}
	return counts
}

// eventStats is what the relays' events say about a run.
type eventStats struct {
	batches int
	// The phases of the batches, each from its own event: claims that
	// took rows, publishes, and recorded outcomes.
	claimMS, publishMS, recordMS []float64
	cycleMS                      []float64 // between consecutive recorded batches after a full one
}

// collect adds ev's events to s; batchSize tells full batches apart.
func (s *eventStats) collect(ev *relayEvents, batchSize int) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	s.batches += len(ev.records)
	for _, c := range ev.claims {
		s.claimMS = append(s.claimMS, c.ms)
	}
	s.publishMS = append(s.publishMS, ev.publishMS...)
	for i, b := range ev.records {
		s.recordMS = append(s.recordMS, b.ms)
		// After a full batch the relay claims again at once, so the gap to
		// the next recorded batch is one whole batch: claim, publish,
		// record.
		if i > 0 && ev.records[i-1].claimed == batchSize {
			s.cycleMS = append(s.cycleMS, ms(b.at.Sub(ev.records[i-1].at)))
		}
	}
}

// eventWindows is what the relays' events say about each window of a soak:
// window i (1 <= i < len(edges)) is the time after edges[i-1] up to and
// including edges[i], on the harness's clock (the relays run on the same
// host, and an event's time is when the relay reported it). Index 0 is
// unused.
type eventWindows struct {
	edges []time.Time
	// claimMS are the durations of the claims that took rows in each
	// window (by when the claim ended).
	claimMS [][]float64
	// retentionRuns and retentionDeleted count the retention runs (runs of
	// the janitor that held the job) and the rows they deleted.
	retentionRuns    []int
	retentionDeleted []int64
}

func newEventWindows(edges []time.Time) *eventWindows {
	return &eventWindows{edges: edges, claimMS: make([][]float64, len(edges)),
		retentionRuns: make([]int, len(edges)), retentionDeleted: make([]int64, len(edges))}
}

// collect adds ev's events to their windows; events outside every window
// are left out.
func (w *eventWindows) collect(ev *relayEvents) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, c := range ev.claims {
		if i := windowIndex(w.edges, c.at); i > 0 {
			w.claimMS[i] = append(w.claimMS[i], c.ms)
		}
	}
	for _, j := range ev.janitor {
		if i := windowIndex(w.edges, j.at); i > 0 {
			w.retentionRuns[i]++
			w.retentionDeleted[i] += j.deleted
		}
	}
}

// windowIndex returns i such that edges[i-1] < t <= edges[i], or -1 when t
// is at or before edges[0] or after the last edge. edges must be sorted.
func windowIndex(edges []time.Time, t time.Time) int {
	i := sort.Search(len(edges), func(i int) bool { return !edges[i].Before(t) })
	if i == 0 || i == len(edges) {
		return -1
	}
	return i
}
