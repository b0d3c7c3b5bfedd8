package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"

	"github.com/outboxrelay/outboxrelay/internal/history"
	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// relayBin is the `relay` binary TestMain builds.
var relayBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outbox-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	relayBin = filepath.Join(dir, "relay")
	if out, err := exec.Command("go", "build", "-o", relayBin, "github.com/outboxrelay/outboxrelay/cmd/relay").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build relay: %v\n%s", err, out)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	leakcheck.Main(m, leakcheck.KafkaGo, leakcheck.PgxPool, leakcheck.Puddle, leakcheck.KFake,
		"github.com/nats-io/nats.go", "github.com/rabbitmq/amqp091-go", "github.com/redis/go-redis/",
		"github.com/go-sql-driver/mysql", "database/sql.", leakcheck.GRPCClient, leakcheck.GRPCSerializer, leakcheck.PStest)
}

// malformedRows are inserted by hand during the run, as a buggy application
// or a manual fix might, in the plain topic and elsewhere: each must end
// failed with its reason while everything else flows.
func malformedRows(plain string) []struct{ topic, headers string } {
	return []struct{ topic, headers string }{
		{plain, `[1, 2]`},
		{plain, `{"n": 1}`},
		{"bad topic!", `{}`},
	}
}

// TestChaos runs the fault schedule of the profile (OUTBOX_CHAOS_PROFILE)
// against relays, the database (OUTBOX_CHAOS_DB: PostgreSQL or MariaDB)
// and the broker of the sink (OUTBOX_CHAOS_SINK) while the producer
// writes, then drains and checks the history. See the package comment.
func TestChaos(t *testing.T) {
	p, seed, err := settings()
	if err != nil {
		t.Fatal(err)
	}
	sinkName, sk, err := sinkFromEnv(seed)
	if err != nil {
		t.Fatal(err)
	}
	dbName, db, err := databaseFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	ordered, plain := sk.topics()
	faultKinds := db.kinds(sk.kinds())
	rng := rand.New(rand.NewPCG(seed, 1))
	steps := schedule(p, faultKinds, rng)
	// The Kafka run's lines are as they were before other sinks came;
	// another sink's name their own.
	sinkTag := ""
	if sinkName != "kafka" {
		sinkTag = "sink=" + sinkName + " "
		t.Logf("sink %s (replay: OUTBOX_CHAOS_SINK=%s OUTBOX_CHAOS_SEED=%d), topics %s (ordered) and %s", sinkName, sinkName, seed, ordered, plain)
	}
	// Likewise the PostgreSQL run's; another database names itself.
	dbTag := ""
	if dbName != "postgres" {
		dbTag = "db=" + dbName + " "
	}
	t.Logf("profile %s, seed %d (replay: OUTBOX_CHAOS_SEED=%d), %d relays, %d faults: %v", p.name, seed, seed, p.relays, len(steps), steps)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	begin := time.Now()
	at := func() string { return "+" + time.Since(begin).Round(100*time.Millisecond).String() }
	c := startCluster(ctx, t, relayBin, p, db, sk, ordered)
	t.Logf("%s cluster up: %s, broker at %s", at(), db.where(), sk.where())
	cons := startConsumers(ctx, t, db, sk, seed, ordered, plain)

	// The producer writes until the last fault is over.
	w, err := outbox.NewWriter(outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	prod := &producer{db: db, w: w, ordered: ordered, plain: plain}
	prodCtx, stopProducer := context.WithCancel(ctx)
	var prodDone sync.WaitGroup
	prodDone.Add(1)
	go func() {
		defer prodDone.Done()
		prod.run(prodCtx, p.writers, p.txPerSecond, seed)
	}()
	defer prodDone.Wait()
	defer stopProducer()

	insertMalformed := func() {
		for _, r := range malformedRows(plain) {
			if err := db.insertMalformed(ctx, r.topic, r.headers); err != nil {
				t.Fatalf("insert a malformed row: %v", err)
			}
		}
	}
	insertMalformed()
	if !await(ctx, 30*time.Second, func() bool {
		st, err := c.statuses(ctx)
		return err == nil && st["sent"] >= 200
	}) {
		t.Fatalf("no events flowing 30s after start; relay stderr:\n%s", syncbuf.Tail(c.slots[0].proc.stderr.String(), 3000))
	}
	t.Logf("%s events flowing; faults begin", at())

	var windows []history.Window
	for i, s := range steps {
		if i == len(steps)/2 {
			insertMalformed() // the second batch lands amid the faults
		}
		win := c.inject(ctx, s, rng)
		windows = append(windows, win)
		t.Logf("%s fault %d/%d %s on %s for %s", at(), i+1, len(steps), s.kind, win.Target, win.End.Sub(win.Start).Round(time.Millisecond))
		if t.Failed() {
			t.FailNow()
		}
		sleep(ctx, p.gap)
	}
	lastFault := windows[len(windows)-1].End
	stopProducer()
	prodDone.Wait()

	// Drain: every committed event sent, nothing pending or processing.
	var st map[string]int
	drained := await(ctx, p.drainTimeout, func() bool {
		st, err = c.statuses(ctx)
		return err == nil && st["pending"]+st["processing"] == 0
	})
	drain := time.Since(lastFault)
	if !drained {
		for _, s := range c.slots {
			t.Logf("stderr of %s (tail):\n%s", s.proc.name, syncbuf.Tail(s.proc.stderr.String(), 3000))
		}
		t.Fatalf("backlog not drained %s after the last fault: %v", p.drainTimeout, st)
	}
	t.Logf("%s drained %s after the last fault: %v", at(), drain.Round(time.Millisecond), st)
	fenced := 0
	for _, pr := range c.all {
		fenced += fencedWrites(pr.stderr.String())
	}
	c.stopAll()
	if dir := os.Getenv("OUTBOX_CHAOS_LOGDIR"); dir != "" {
		c.saveLogs(dir)
	}

	// The consumer reads everything back with the broker's own client;
	// the checker compares.
	records := sk.read(ctx, t)
	deliveries := make([]history.Delivery, 0, len(records))
	for _, r := range records {
		deliveries = append(deliveries, r.Delivery)
	}
	txns := prod.history()
	if bad := corrupted(txns, records); len(bad) > 0 {
		t.Errorf("%d records arrived with another payload than their event's, e.g. %v", len(bad), bad[:min(len(bad), 5)])
	} else if sinkTag != "" {
		t.Logf("%d records read back, every payload as written", len(records))
	}
	var orderedTopics []string
	if ordered != "" {
		orderedTopics = []string{ordered}
	}
	rep := history.Check(history.Input{
		Txns: txns, Deliveries: deliveries, Faults: windows, OrderedTopics: orderedTopics,
		// A publish and its write-back may be seconds apart on a busy
		// machine: Before is the publish timeout and 1 s.
		Before: publishTimeout + time.Second, After: explainAfter,
		Rows:         history.Rows{Pending: st["pending"], Processing: st["processing"], Sent: st["sent"], Failed: st["failed"]},
		ExpectFailed: 2 * len(malformedRows(plain)),
	})
	failed, err := db.failed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range failed {
		if !strings.Contains(f, "malformed") {
			t.Errorf("failed row for another reason than the malformed rows inserted: %s", f)
		}
	}

	inboxSummary := "inbox: skipped"
	if cons != nil {
		inboxSummary = cons.check(ctx, t, txns, records, p.drainTimeout)
	}

	for _, r := range rep.Recoveries {
		t.Logf("outage recovery: %s", r)
	}
	var exits []string
	for _, e := range c.exits {
		exits = append(exits, fmt.Sprintf("%s:%s", e.kind, e.took.Round(time.Millisecond)))
	}

	byKind := map[string]int{}
	for _, w := range windows {
		byKind[w.Kind]++
	}
	var kinds []string
	for k, n := range byKind {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	t.Logf("chaos summary: %s%sprofile=%s seed=%d relays=%d faults=%d (%s) relay_processes=%d produce_refused=%d fenced_writebacks_logged=%d "+
		"sigterm_exits=[%s] (bound %s) drain=%s | %s | %s",
		dbTag, sinkTag, p.name, seed, p.relays, len(windows), strings.Join(kinds, " "), len(c.all), sk.refused(), fenced,
		strings.Join(exits, " "), exitBound, drain.Round(time.Millisecond), rep.Summary(), inboxSummary)
	t.Logf("chaos table row: | %s | %d | %s | %d | %d | %d | %d | %d (%.2f%%) | %d | %s |",
		p.name, seed, strings.Join(kinds, ", "), len(windows), rep.Written, rep.Delivered-rep.UnknownDelivered-rep.RolledBackDelivered,
		rep.Lost, rep.Duplicates, 100*rep.DuplicateRatio(), rep.OrderViolations, drain.Round(100*time.Millisecond))
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	if byKind[brokerErrors] > 0 && sk.refused() == 0 {
		t.Error("broker-errors ran but no produce request was refused: the fault did nothing")
	}
	if missing := slices.DeleteFunc(slices.Clone(faultKinds), func(k string) bool { return byKind[k] > 0 }); p.duration == 0 && len(missing) > 0 {
		t.Errorf("fault kinds that never ran: %v", missing)
	}
}

// await polls cond every 20ms until it holds, ctx ends or timeout passes.
func await(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		sleep(ctx, 20*time.Millisecond)
	}
	return true
}

// corrupted lists the records whose payload is not the one their event was
// written with (records of events the producer never wrote are the
// checker's foreign records).
func corrupted(txns []history.Txn, records []record) []string {
	want := map[string]string{}
	for _, tx := range txns {
		for _, ev := range tx.Events {
			want[ev.ID] = string(payload(ev.Key, ev.Seq))
		}
	}
	var bad []string
	for _, r := range records {
		if w, ok := want[r.EventID]; ok && r.payload != w {
			bad = append(bad, fmt.Sprintf("%s (%s/%s)", r.EventID, r.Topic, r.Key))
		}
	}
	return bad
}
