package bench

import (
	"bufio"
	"encoding/json"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// The relay's log messages the harness reads (relay/run.go, relay/batch.go).
const (
	msgStarted      = "relay started"
	msgBatchDone    = "batch done"
	msgRetentionRun = "retention run" // relay/janitor.go; debug level when nothing was deleted
)

// logLine is the part of a relay's JSON log line (--log-format json) the
// harness uses. The _ms fields are the phases of a batch as the relay
// timed them ("batch done"); a relay that does not log them leaves them
// nil.
type logLine struct {
	Time      time.Time `json:"time"`
	Level     string    `json:"level"`
	Msg       string    `json:"msg"`
	Claimed   *int      `json:"claimed"`
	ClaimMS   *float64  `json:"claim_ms"`
	PublishMS *float64  `json:"publish_ms"`
	RecordMS  *float64  `json:"record_ms"`
	Deleted   *int64    `json:"deleted"` // "retention run"
}

// batchLine is one "batch done" line.
type batchLine struct {
	at                           time.Time
	claimed                      int
	claimMS, publishMS, recordMS *float64
}

// retentionLine is one "retention run" line: a run of the janitor that held
// the job.
type retentionLine struct {
	at      time.Time
	deleted int64
}

// relayLog collects what one relay logs on standard error.
type relayLog struct {
	started   chan struct{}
	startOnce sync.Once

	mu         sync.Mutex
	batches    []batchLine
	retentions []retentionLine
	warnings   map[string]int // WARN and ERROR lines by message
	tail       []string       // the last tailLines lines, for error messages
}

const tailLines = 20

func newRelayLog() *relayLog {
	return &relayLog{started: make(chan struct{}), warnings: map[string]int{}}
}

// consume reads r until EOF. Lines that are not JSON (a panic, say) only
// go to the tail.
func (l *relayLog) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		l.add(sc.Bytes())
	}
}

func (l *relayLog) add(raw []byte) {
	var line logLine
	parsed := json.Unmarshal(raw, &line) == nil
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tail = append(l.tail, string(raw))
	if len(l.tail) > tailLines {
		l.tail = l.tail[len(l.tail)-tailLines:]
	}
	if !parsed {
		return
	}
	switch {
	case line.Level == "WARN" || line.Level == "ERROR":
		l.warnings[line.Msg]++
	case line.Msg == msgStarted:
		l.startOnce.Do(func() { close(l.started) })
	case line.Msg == msgBatchDone && line.Claimed != nil:
		l.batches = append(l.batches, batchLine{at: line.Time, claimed: *line.Claimed,
			claimMS: line.ClaimMS, publishMS: line.PublishMS, recordMS: line.RecordMS})
	case line.Msg == msgRetentionRun && line.Deleted != nil:
		l.retentions = append(l.retentions, retentionLine{at: line.Time, deleted: *line.Deleted})
	}
}

// lastLines returns the tail of the log, for error messages.
func (l *relayLog) lastLines() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.tail, "\n")
}

// batchCount returns the "batch done" lines and the rows they claimed.
func (l *relayLog) batchCount() (batches, claimed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.batches {
		claimed += b.claimed
	}
	return len(l.batches), claimed
}

// logStats is what the relays' logs say about a run.
type logStats struct {
	batches  int
	warnings map[string]int
	// The phases of the batches, when the relays log them.
	claimMS, publishMS, recordMS []float64
	cycleMS                      []float64 // between consecutive batches after a full one
}

// collect adds l's batches to s; batchSize tells full batches apart.
func (s *logStats) collect(l *relayLog, batchSize int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.batches += len(l.batches)
	for msg, n := range l.warnings {
		if s.warnings == nil {
			s.warnings = map[string]int{}
		}
		s.warnings[msg] += n
	}
	for i, b := range l.batches {
		s.claimMS = appendSet(s.claimMS, b.claimMS)
		s.publishMS = appendSet(s.publishMS, b.publishMS)
		s.recordMS = appendSet(s.recordMS, b.recordMS)
		// After a full batch the relay claims again at once, so the gap to
		// the next line is one whole batch: claim, publish, record.
		if i > 0 && l.batches[i-1].claimed == batchSize {
			s.cycleMS = append(s.cycleMS, float64(b.at.Sub(l.batches[i-1].at))/float64(time.Millisecond))
		}
	}
}

// appendSet appends *v to s unless v is nil.
func appendSet(s []float64, v *float64) []float64 {
	if v == nil {
		return s
	}
	return append(s, *v)
}

// logWindows is what the relays' logs say about each window of a soak:
// window i (1 <= i < len(edges)) is the time after edges[i-1] up to and
// including edges[i], on the harness's clock (the relays run on the same
// host, and a log line's time is when the relay wrote it). Index 0 is
// unused.
type logWindows struct {
	edges []time.Time
	// claimMS are the claim_ms of the "batch done" lines written in each
	// window (a batch is counted when it is done: claim, publish and
	// record; empty claims log no line).
	claimMS [][]float64
	// retentionRuns and retentionDeleted count the "retention run" lines
	// (runs of the janitor that held the job) and the rows they deleted.
	retentionRuns    []int
	retentionDeleted []int64
}

func newLogWindows(edges []time.Time) *logWindows {
	return &logWindows{edges: edges, claimMS: make([][]float64, len(edges)),
		retentionRuns: make([]int, len(edges)), retentionDeleted: make([]int64, len(edges))}
}

// collect adds l's lines to their windows; lines outside every window are
// left out.
func (w *logWindows) collect(l *relayLog) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.batches {
		if i := windowIndex(w.edges, b.at); i > 0 && b.claimMS != nil {
			w.claimMS[i] = append(w.claimMS[i], *b.claimMS)
		}
	}
	for _, r := range l.retentions {
		if i := windowIndex(w.edges, r.at); i > 0 {
			w.retentionRuns[i]++
			w.retentionDeleted[i] += r.deleted
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
