package bench

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"time"
)

// The relay's log messages the harness reads (relay/run.go, relay/batch.go).
const (
	msgStarted   = "relay started"
	msgBatchDone = "batch done"
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
}

// batchLine is one "batch done" line.
type batchLine struct {
	at                           time.Time
	claimed                      int
	claimMS, publishMS, recordMS *float64
}

// relayLog collects what one relay logs on standard error.
type relayLog struct {
	started   chan struct{}
	startOnce sync.Once

	mu       sync.Mutex
	batches  []batchLine
	warnings map[string]int // WARN and ERROR lines by message
	tail     []string       // the last tailLines lines, for error messages
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
