package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// memFile is an in-memory observe file; closing it is recorded.
type memFile struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	closed bool
}

func (f *memFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.Write(p)
}

func (f *memFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *memFile) lines() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Split(strings.TrimSuffix(f.buf.String(), "\n"), "\n")
}

// withoutTime returns a line with its time removed, after checking that
// it is there.
func withoutTime(t *testing.T, line string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("not JSON: %q", line)
	}
	var at time.Time
	if err := json.Unmarshal(m["time"], &at); err != nil || at.IsZero() {
		t.Errorf("line %s: time %s is not an RFC 3339 time", line, m["time"])
	}
	_, rest, _ := strings.Cut(line, `",`)
	return "{" + rest
}

// Each kind of event is written in the documented form, with the fields
// it sets and no others, after a started line before the first claim;
// close flushes and closes the file.
func TestObserveFileForm(t *testing.T) {
	t.Parallel()
	f := &memFile{}
	o := newObserveFile(f, "mem", slog.New(slog.DiscardHandler))
	o.relayID = "r-1"
	for _, e := range []relay.Event{
		{Kind: relay.EventOutageStarted, Rows: 3, Err: "broker down"},
		{Kind: relay.EventOutageEnded, Rows: 7, Duration: 1500 * time.Millisecond},
		{Kind: relay.EventClaimed, Claim: relay.ClaimLease, Rows: 100, Duration: 1930 * time.Microsecond},
		{Kind: relay.EventClaimed, Claim: relay.ClaimLease},
		{Kind: relay.EventPublished, Claim: relay.ClaimLock, Rows: 99, Duration: 4 * time.Millisecond},
		{Kind: relay.EventRecorded, Claim: relay.ClaimOrdered, Duration: 2200 * time.Microsecond,
			Result: relay.BatchResult{Claimed: 100, Sent: 90, Retried: 4, Failed: 3, Released: 1, Fenced: 1, Abandoned: 1, SinkUnavailable: true, Backoff: 250 * time.Millisecond}},
		{Kind: relay.EventLeaseLost, Rows: 5},
		{Kind: relay.EventJanitorRan, Rows: 1000, Duration: 12 * time.Millisecond},
		{Kind: relay.EventShardHandedBack, Shard: 0, Rows: 40},
		{Kind: relay.EventShardLeased, Shard: 3},
		{Kind: relay.EventKind(99), Rows: 2, Duration: time.Millisecond},
	} {
		o.Observe(e)
	}
	o.close()
	// A second close does nothing; an event after close is dropped
	// without a word.
	o.close()
	o.Observe(relay.Event{Kind: relay.EventClaimed, Rows: 1})
	want := []string{
		`{"kind":"outage_started","rows":3,"err":"broker down"}`,
		`{"kind":"outage_ended","rows":7,"duration_ms":1500}`,
		`{"kind":"started","relay_id":"r-1"}`,
		`{"kind":"claimed","claim":"lease","rows":100,"duration_ms":1.93}`,
		`{"kind":"claimed","claim":"lease","rows":0,"duration_ms":0}`,
		`{"kind":"published","claim":"lock","rows":99,"duration_ms":4}`,
		`{"kind":"recorded","claim":"ordered","duration_ms":2.2,"result":{"claimed":100,"sent":90,"retried":4,"failed":3,"released":1,"fenced":1,"abandoned":1,"sink_unavailable":true,"backoff_ms":250}}`,
		`{"kind":"lease_lost","rows":5}`,
		`{"kind":"janitor_ran","rows":1000,"duration_ms":12}`,
		`{"kind":"shard_handed_back","rows":40,"shard":0}`,
		`{"kind":"shard_leased","shard":3}`,
		`{"kind":"unknown","rows":2,"duration_ms":1}`,
	}
	got := f.lines()
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if g := withoutTime(t, got[i]); g != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, g, want[i])
		}
	}
	if !f.closed {
		t.Error("close did not close the file")
	}
}

// Observe is safe from many goroutines at once; the started line comes
// once, before every claimed line. close writes every queued line to a
// regular file, however long a busy machine takes (close once gave up
// after 100ms and lost the rest: 657 of 801 lines were seen).
func TestObserveFileConcurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	o, err := openObserveFile(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 8, 100 // fewer than observeQueue in all: none dropped
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				o.Observe(relay.Event{Kind: relay.EventClaimed, Claim: relay.ClaimLease, Rows: 1})
			}
		})
	}
	wg.Wait()
	o.close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != goroutines*each+1 || !strings.Contains(lines[0], `"kind":"started"`) {
		t.Fatalf("%d lines, the first %s: want %d, the first a started line", len(lines), lines[0], goroutines*each+1)
	}
	for _, l := range lines[1:] {
		if !strings.Contains(l, `"kind":"claimed"`) {
			t.Fatalf("line %s: want claimed", l)
		}
	}
}

// gatedFile blocks every Write until open is closed, and says on entered
// that a Write is waiting.
type gatedFile struct {
	memFile
	entered chan struct{}
	open    chan struct{}
}

func (f *gatedFile) Write(p []byte) (int, error) {
	select {
	case f.entered <- struct{}{}:
	default:
	}
	<-f.open
	return f.memFile.Write(p)
}

// While the file takes nothing, Observe neither waits nor queues more than
// observeQueue events; the rest are counted in a dropped line where they
// are missing.
func TestObserveFileDropsRatherThanWait(t *testing.T) {
	t.Parallel()
	f := &gatedFile{entered: make(chan struct{}, 1), open: make(chan struct{})}
	o := newObserveFile(f, "gated", slog.New(slog.DiscardHandler))
	o.closeWait = time.Minute // the test, not the bound, decides when the writes end
	o.Observe(relay.Event{Kind: relay.EventPublished, Rows: -1})
	<-f.entered // the writer flushes the first line and waits in Write
	const extra = 5
	for i := range observeQueue + extra {
		o.Observe(relay.Event{Kind: relay.EventPublished, Rows: i})
	}
	close(f.open)
	o.close()
	lines := f.lines()
	if len(lines) != 1+observeQueue+1 {
		t.Fatalf("%d lines, want the first, the %d queued and a dropped line", len(lines), observeQueue)
	}
	if last := withoutTime(t, lines[len(lines)-1]); last != `{"kind":"dropped","events":5}` {
		t.Errorf("last line %s, want the count of the %d dropped", last, extra)
	}
	if !strings.Contains(lines[len(lines)-2], `"rows":1023,`) {
		t.Errorf("the last event written is %s, want the %dth published one", lines[len(lines)-2], observeQueue)
	}
}

// A pipe nobody reads gets observeCloseBound to take the last lines: then
// its writes fail (said once), and close closes it.
func TestObserveFilePipeNobodyReads(t *testing.T) {
	t.Parallel()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var logs syncbuf.Buffer
	o := newObserveFile(pw, "pipe", slog.New(slog.NewTextHandler(&logs, nil)))
	o.closeWait = time.Minute     // only the pipe's write deadline ends the writes
	for i := range observeQueue { // about 100 bytes each: more than the pipe's 64 KiB
		o.Observe(relay.Event{Kind: relay.EventPublished, Rows: i})
	}
	returned := make(chan struct{})
	go func() {
		o.close()
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(time.Minute): // a safety net: the pipe's writes end at their deadline
		t.Fatal("close still waits for a pipe nobody reads")
	}
	select {
	case <-o.done:
	default:
		t.Error("close returned before the writer did")
	}
	if !strings.Contains(logs.String(), "writing the observe file failed") {
		t.Errorf("the failed write was not logged; log:\n%s", logs.String())
	}
	if _, err := io.Copy(io.Discard, pr); err != nil { // ends: the write end is closed
		t.Errorf("reading the pipe after close: %v", err)
	}
}

// A write that does not return on a file that takes no deadline (a file
// system that stopped answering) holds close up closeWait only: close
// closes the file and says so.
func TestObserveFileCloseGivesUpOnAStuckWrite(t *testing.T) {
	t.Parallel()
	f := &gatedFile{entered: make(chan struct{}, 1), open: make(chan struct{})}
	var logs syncbuf.Buffer
	o := newObserveFile(f, "stuck", slog.New(slog.NewTextHandler(&logs, nil)))
	o.closeWait = 10 * time.Millisecond
	o.Observe(relay.Event{Kind: relay.EventPublished, Rows: 1})
	<-f.entered // the writer flushes the line and waits in Write for good
	returned := make(chan struct{})
	go func() {
		o.close()
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(time.Minute): // a safety net: close must not wait on the write
		t.Fatal("close still waits for a write that does not return")
	}
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if !closed {
		t.Error("close did not close the file")
	}
	if !strings.Contains(logs.String(), "the observe file did not take the last events in time") {
		t.Errorf("close did not say why it gave up; log:\n%s", logs.String())
	}
	close(f.open)
	<-o.done
}

// relay run --observe-file writes the events of a real relay while it runs
// (the reader sees them before it stops), starting with the started line,
// and a path it cannot open exits 2 naming the flag.
func TestRunObserveFile(t *testing.T) {
	t.Parallel()
	pool, table := testdb.NewEmpty(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema}
	path := filepath.Join(t.TempDir(), "events.jsonl")

	code, _, stderr := invoke(ctx, env, "run", "--sink", "stdout", "--observe-file", filepath.Join(path, "nowhere"))
	if code != 2 || !strings.Contains(stderr, "invalid value for --observe-file (OUTBOX_OBSERVE_FILE)") {
		t.Fatalf("an observe file in a missing directory: exit %d, want 2 naming the flag; stderr:\n%s", code, stderr)
	}

	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := w.Write(ctx, pool, outbox.Message{Topic: "observe.test", Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out, errOut syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "stdout", "--relay-id", "obs-1", "--poll-interval", "20ms", "--observe-file", path},
			func(k string) string { return env[k] }, &out, &errOut)
	}()
	sent := func() int {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		// The writer may be half-way through a line: leave it out.
		b = b[:bytes.LastIndexByte(b, '\n')+1]
		n := 0
		for _, l := range observeLines(t, b) {
			if l.Kind == "recorded" && l.Result != nil {
				n += l.Result.Sent
			}
		}
		return n
	}
	await(t, 10*time.Second, func() bool { return sent() == 3 })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d; stderr:\n%s", code, errOut.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := observeLines(t, b)
	// The started line comes just before the first claimed line; the
	// janitor, which runs beside the claims, may report before it.
	first := slices.IndexFunc(lines, func(l observeLine) bool { return l.Kind == "claimed" })
	if first < 1 || len(lines) < 4 || lines[first-1].Kind != "started" || lines[first-1].RelayID != "obs-1" {
		t.Fatalf("want a started line of relay obs-1 just before the first claimed line:\n%s", b)
	}
	claimed, published := 0, 0
	for i, l := range lines {
		switch {
		case l.Kind == "started" && i != first-1:
			t.Errorf("a second started line:\n%s", b)
		case l.Kind == "claimed" && (l.Claim != "lease" || l.Rows == nil || l.DurationMS == nil):
			t.Errorf("claimed line without claim, rows or duration:\n%s", b)
		case l.Kind == "claimed":
			claimed += *l.Rows
		case l.Kind == "published" && l.Rows != nil:
			published += *l.Rows
		}
	}
	if claimed != 3 || published != 3 {
		t.Errorf("claimed %d, published %d: want 3 each:\n%s", claimed, published, b)
	}
}

// observeLines decodes the lines of an observe file.
func observeLines(t *testing.T, b []byte) []observeLine {
	t.Helper()
	var out []observeLine
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var l observeLine
		if err := dec.Decode(&l); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("observe file: %v:\n%s", err, b)
		}
		out = append(out, l)
	}
}
