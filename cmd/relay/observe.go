package main

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outboxrelay/relay"
)

// --observe-file PATH appends what the relay reports to its relay.Observer
// to PATH, one JSON object per line, in the order the events were reported.
// The form is stable: programs read it (relay-bench does). Examples:
//
//	{"time":"2026-05-04T10:00:00.1234Z","kind":"started","relay_id":"host-41-a1b2"}
//	{"time":"2026-05-04T10:00:00.1301Z","kind":"claimed","claim":"lease","rows":100,"duration_ms":1.93}
//	{"time":"2026-05-04T10:00:00.1352Z","kind":"published","claim":"lease","rows":100,"duration_ms":4.61}
//	{"time":"2026-05-04T10:00:00.1377Z","kind":"recorded","claim":"lease","duration_ms":2.2,"result":{"claimed":100,"sent":100,"retried":0,"failed":0,"released":0,"fenced":0,"abandoned":0,"sink_unavailable":false,"backoff_ms":0}}
//
// Every line has time (when the relay reported the event, RFC 3339 on the
// relay's clock) and kind: the name of the relay.EventKind, or "started"
// or "dropped", which the binary writes itself. The other fields are those
// the kind sets, and only those:
//
//	started            relay_id; written once, just before the first
//	                   "claimed" line: the relay's first claim statement ran
//	                   (the database answered, the table is migrated, the
//	                   sink was not found down), so it is serving
//	claimed            claim, rows (0 for a claim that found nothing), duration_ms
//	published          claim, rows, duration_ms
//	recorded           claim, duration_ms (the write-back), result
//	lease_lost         rows
//	outage_started     rows (deferred), err
//	outage_ended       rows (deferred during the outage), duration_ms
//	janitor_ran        rows (deleted), duration_ms
//	shard_handed_back  shard, rows
//	shard_leased       shard: the ordered loop leased it (a
//	                   shard_handed_back line follows when it is done)
//	dropped            events: that many events were left out at this
//	                   point because the file did not take them fast enough
//
// With --tables naming several tables, every line but started and dropped
// also has table, the schema.name of the table whose relay reported it.
//
// claim is "lease", "lock" or "ordered"; durations are milliseconds;
// result is the relay.BatchResult of the batch, its Backoff as backoff_ms.
// A kind this list does not name (a later relay's) is written with its
// name, rows and duration_ms, and claim and err when they are set.
//
// Observing never holds the relay up: Observe queues the event and
// returns; one goroutine writes the lines through a buffer that it flushes
// whenever the queue runs empty, so a reader following the file (or a
// pipe) sees each line within moments. When observeQueue events wait, the
// next are dropped and counted, and the count is written as a "dropped"
// line where they are missing. At shutdown, after Run has returned, close writes what is queued,
// flushes and closes the file: all of it to a regular file, however busy
// the machine; a pipe or FIFO gets observeCloseBound to take it. A write
// error stops the writing (logged once); the relay goes on.

// observeQueue is how many events may wait for the writer.
const observeQueue = 1024

// observeCloseBound is how long a pipe or FIFO (a file that takes a write
// deadline) has at close to take the queued lines: one nobody reads would
// never take them. The process exits within --shutdown-timeout + 2s:
// runGrace and the closeBound of the sink and of the pool take 1.9s of
// those 2s.
const observeCloseBound = 100 * time.Millisecond

// observeCloseLimit is the longest close waits for the writer. A regular
// file takes no deadline: its lines are written however long a busy
// machine takes (at most observeQueue are left at close), and only a write
// that hangs (a file system that stopped answering) runs into the limit.
const observeCloseLimit = 5 * time.Second

// observeFile is the relay.Observer behind --observe-file.
type observeFile struct {
	w    io.WriteCloser
	name string // the path, for messages
	log  *slog.Logger
	// relayID is the relay's id, for the started line; set after
	// relay.New, before Run reports anything.
	relayID string

	queue chan observed
	stop  chan struct{} // closed by close
	done  chan struct{} // closed when the writer has flushed and returned
	// closeWait is how long close waits for the writer: observeCloseLimit.
	closeWait time.Duration
	closed    atomic.Bool
	// dropped counts the events dropped since the last one queued.
	dropped atomic.Int64
	started sync.Once
}

// observed is one queued line: an event, or the started line, and how
// many events were dropped just before it.
type observed struct {
	at      time.Time
	started bool
	e       relay.Event
	table   string // the table of the relay that reported e, with several
	dropped int64
}

// openObserveFile opens path for appending, creating it if needed, and
// starts its writer.
func openObserveFile(path string, logger *slog.Logger) (*observeFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return newObserveFile(f, path, logger), nil
}

// newObserveFile starts a writer of observer events to w.
func newObserveFile(w io.WriteCloser, name string, logger *slog.Logger) *observeFile {
	o := &observeFile{w: w, name: name, log: logger,
		queue: make(chan observed, observeQueue), stop: make(chan struct{}), done: make(chan struct{}), closeWait: observeCloseLimit}
	go o.write()
	return o
}

// Observe queues e, and the started line before the first claim; it never
// waits.
func (o *observeFile) Observe(e relay.Event) { o.observe(e, "") }

// observe is Observe for the relay of table ("" for the only one).
func (o *observeFile) observe(e relay.Event, table string) {
	now := time.Now()
	if e.Kind == relay.EventClaimed {
		o.started.Do(func() { o.enqueue(observed{at: now, started: true}) })
	}
	o.enqueue(observed{at: now, e: e, table: table})
}

// forTable returns the observer of the relay of table: its lines name the
// table.
func (o *observeFile) forTable(table string) relay.Observer { return tableObserveFile{o, table} }

// tableObserveFile is the observe file as one table's relay sees it.
type tableObserveFile struct {
	o     *observeFile
	table string
}

func (t tableObserveFile) Observe(e relay.Event) { t.o.observe(e, t.table) }

// enqueue queues x with the count of the events dropped before it, or
// counts x as dropped when the queue is full. After close nothing is
// queued.
func (o *observeFile) enqueue(x observed) {
	if o.closed.Load() {
		return
	}
	x.dropped = o.dropped.Swap(0)
	select {
	case o.queue <- x:
	default:
		o.dropped.Add(x.dropped + 1)
	}
}

// write writes the queued lines until close, then those still queued.
func (o *observeFile) write() {
	defer close(o.done)
	buf := bufio.NewWriterSize(o.w, 64<<10)
	var err error // the first write error; nothing is written after it
	warned := false
	put := func(l observeLine) {
		if err == nil {
			err = writeLine(buf, l)
		}
	}
	// putDropped writes a count of dropped events, if it is one.
	putDropped := func(at time.Time, n int64) {
		if n > 0 {
			put(observeLine{Time: at, Kind: "dropped", Events: n})
		}
	}
	putQueued := func(x observed) {
		putDropped(x.at, x.dropped)
		put(o.line(x))
	}
	flush := func() {
		if err == nil {
			err = buf.Flush()
		}
		if err != nil && !warned {
			o.log.Warn("writing the observe file failed; it gets no more events", "path", o.name, "error", err)
			warned = true
		}
	}
	for {
		select {
		case x := <-o.queue:
			putQueued(x)
			if len(o.queue) == 0 {
				flush()
			}
		case <-o.stop:
			for len(o.queue) > 0 {
				putQueued(<-o.queue)
			}
			putDropped(time.Now(), o.dropped.Swap(0)) // those after the last queued
			flush()
			return
		}
	}
}

// close stops taking events, writes those queued, flushes and closes the
// file. A file that takes a write deadline (a pipe, a FIFO: nobody may read
// it) gets observeCloseBound for the writes; close waits for the writer at
// most closeWait. Call it once Run has returned.
func (o *observeFile) close() {
	if o.closed.Swap(true) {
		return
	}
	close(o.stop)
	if f, ok := o.w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		_ = f.SetWriteDeadline(time.Now().Add(observeCloseBound)) // os.ErrNoDeadline for a regular file
	}
	t := time.NewTimer(o.closeWait)
	defer t.Stop()
	select {
	case <-o.done:
	case <-t.C:
		o.log.Warn("the observe file did not take the last events in time; closing it", "path", o.name, "waited", o.closeWait)
	}
	if err := o.w.Close(); err != nil {
		o.log.Warn("closing the observe file failed", "path", o.name, "error", err)
	}
}

// observeLine is one line of the file; see the top of this file.
type observeLine struct {
	Time       time.Time      `json:"time"`
	Kind       string         `json:"kind"`
	RelayID    string         `json:"relay_id,omitempty"`
	Table      string         `json:"table,omitempty"`
	Claim      string         `json:"claim,omitempty"`
	Rows       *int           `json:"rows,omitempty"`
	DurationMS *float64       `json:"duration_ms,omitempty"`
	Result     *observeResult `json:"result,omitempty"`
	Shard      *int           `json:"shard,omitempty"`
	Err        *string        `json:"err,omitempty"`
	Events     int64          `json:"events,omitempty"`
}

// observeResult is relay.BatchResult in the file.
type observeResult struct {
	Claimed         int     `json:"claimed"`
	Sent            int     `json:"sent"`
	Retried         int     `json:"retried"`
	Failed          int     `json:"failed"`
	Released        int     `json:"released"`
	Fenced          int     `json:"fenced"`
	Abandoned       int     `json:"abandoned"`
	SinkUnavailable bool    `json:"sink_unavailable"`
	BackoffMS       float64 `json:"backoff_ms"`
}

// line returns the line of x.
func (o *observeFile) line(x observed) observeLine {
	if x.started {
		return observeLine{Time: x.at, Kind: "started", RelayID: o.relayID}
	}
	e := x.e
	l := observeLine{Time: x.at, Kind: e.Kind.String(), Table: x.table}
	rows, took := e.Rows, float64(e.Duration)/float64(time.Millisecond)
	switch e.Kind {
	case relay.EventClaimed, relay.EventPublished:
		l.Claim, l.Rows, l.DurationMS = string(e.Claim), &rows, &took
	case relay.EventRecorded:
		r := e.Result
		l.Claim, l.DurationMS = string(e.Claim), &took
		l.Result = &observeResult{Claimed: r.Claimed, Sent: r.Sent, Retried: r.Retried, Failed: r.Failed, Released: r.Released,
			Fenced: r.Fenced, Abandoned: r.Abandoned, SinkUnavailable: r.SinkUnavailable, BackoffMS: float64(r.Backoff) / float64(time.Millisecond)}
	case relay.EventLeaseLost:
		l.Rows = &rows
	case relay.EventOutageStarted:
		l.Rows, l.Err = &rows, &e.Err
	case relay.EventOutageEnded, relay.EventJanitorRan:
		l.Rows, l.DurationMS = &rows, &took
	case relay.EventShardHandedBack:
		l.Shard, l.Rows = &e.Shard, &rows
	case relay.EventShardLeased:
		l.Shard = &e.Shard
	default:
		l.Claim, l.Rows, l.DurationMS = string(e.Claim), &rows, &took
		if e.Err != "" {
			l.Err = &e.Err
		}
	}
	return l
}

// writeLine writes l as one JSON line.
func writeLine(w io.Writer, l observeLine) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
