package bench

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
	"sync"
)

// logLine is the part of a relay's JSON log line (--log-format json) the
// harness uses: the level and message of warnings and errors.
type logLine struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
}

// relayLog collects what one relay logs on standard error: its warnings,
// and the last lines for error messages. What the relay did comes from its
// observer instead (relayEvents).
type relayLog struct {
	mu       sync.Mutex
	warnings map[string]int // WARN and ERROR lines by message
	tail     []string       // the last tailLines lines, for error messages
}

const tailLines = 20

func newRelayLog() *relayLog {
	return &relayLog{warnings: map[string]int{}}
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
	if parsed && (line.Level == "WARN" || line.Level == "ERROR") {
		l.warnings[line.Msg]++
	}
}

// lastLines returns the tail of the log, for error messages.
func (l *relayLog) lastLines() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.tail, "\n")
}

// addWarnings adds l's warnings to counts (made if nil) and returns it.
func (l *relayLog) addWarnings(counts map[string]int) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for msg, n := range l.warnings {
		if counts == nil {
			counts = map[string]int{}
		}
		counts[msg] += n
	}
	return counts
}
