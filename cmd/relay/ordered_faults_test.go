package main

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// faultSeedEnv overrides the seed of the injected produce errors, to replay
// a run: the test logs the seed it used.
const faultSeedEnv = "OUTBOX_TEST_FAULT_SEED"

// Per-key order holds across three `relay run` processes in ordered mode
// while events are still being written, the broker refuses a random ~10% of
// produce requests with retriable errors, one relay is killed with SIGKILL
// in the middle of a batch and a replacement takes its place: every
// committed event arrives, each key's events arrive in the order written
// (duplicates allowed, reordering not), and no rolled-back event arrives.
func TestOrderedDeliverySurvivesFaults(t *testing.T) {
	t.Parallel()
	const (
		topic   = "ordered.faults"
		keys    = 256
		perKey  = 12
		writers = 8
		total   = keys * perKey
		// Keys k with k%rollbackEvery == rollbackEvery-1 get a rolled-back
		// event in the middle of their sequence, held open while the next
		// real event of the key commits.
		rollbackEvery = 32
		rollbackAtSeq = 5
		// Keys written only in rolled-back transactions.
		rolledBackOnlyKeys = 4
		// At the end, overlapKeys keys get two events each from
		// overlapping transactions: the first writes, the second writes
		// and commits, then the first commits. Per docs/ordering.md they
		// are ordered by transaction id: the first comes first, though it
		// became visible last.
		overlapKeys = 4
		// How long the first transactions stay open, unless a relay claims
		// a second event sooner (which it must not).
		overlapHold = 300 * time.Millisecond
		// The victim is killed once this many events were sent.
		killAfter = 100
	)
	pool, table := testdb.New(t)
	ctx := context.Background()
	br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	bin := buildBinary(t)
	start := time.Now()
	elapsed := func() string { return time.Since(start).Round(time.Millisecond).String() }

	// Sink errors: a seeded random ~10% of produce requests are answered
	// with a retriable error on every partition. Some refusals start a
	// streak: the partition's next two produce requests are refused too, so
	// that kafka-go's own retries (3 attempts) run out and the relay itself
	// sees the failure and retries the event later, holding its key's
	// later events behind it (head of line). The rest are absorbed by
	// kafka-go's retries.
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(faultSeedEnv); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", faultSeedEnv, s, err)
		}
	}
	t.Logf("fault seed %d (replay with %s=%d)", seed, faultSeedEnv, seed)
	var (
		rngMu             sync.Mutex
		rng               = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		streak            = map[int32]int{} // partition -> produce requests still to refuse
		produces, refused atomic.Int64
		streaks           atomic.Int64
	)
	retriable := []int16{kerr.NotLeaderForPartition.Code, kerr.RequestTimedOut.Code}
	br.Cluster().ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		br.Cluster().KeepControl()
		produces.Add(1)
		pr := req.(*kmsg.ProduceRequest)
		var parts []int32
		for _, rt := range pr.Topics {
			for _, rp := range rt.Partitions {
				parts = append(parts, rp.Partition)
			}
		}
		rngMu.Lock()
		fail := false
		for _, p := range parts {
			if streak[p] > 0 {
				streak[p]--
				fail = true
			}
		}
		if !fail && rng.Float64() < 0.07 {
			fail = true
			if rng.Float64() < 0.25 {
				streaks.Add(1)
				for _, p := range parts {
					streak[p] = 2
				}
			}
		}
		code := retriable[rng.IntN(len(retriable))]
		rngMu.Unlock()
		if !fail {
			return nil, nil, false
		}
		refused.Add(1)
		return kfakebroker.ProduceErrorResponse(pr, code), nil, true
	})

	// The relays.
	type proc struct {
		name   string
		cmd    *exec.Cmd
		stderr *syncbuf.Buffer
		done   chan error
	}
	var procs []*proc
	startRelay := func(name string) *proc {
		cmd := exec.Command(bin, "run", "--ordered-topics", "*", "--shards", "8",
			"--batch-size", "50", "--poll-interval", "20ms", "--lease", "2s", "--relay-id", name)
		// application_name lets the test see the relay's sessions in
		// pg_stat_activity.
		dsn := testdb.URL(t)
		switch {
		case !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://"):
			dsn += " application_name=" + name // keyword/value form
		case strings.Contains(dsn, "?"):
			dsn += "&application_name=" + name
		default:
			dsn += "?application_name=" + name
		}
		cmd.Env = append(os.Environ(),
			"OUTBOX_DATABASE_URL="+dsn, "OUTBOX_SCHEMA="+table.Schema,
			"OUTBOX_KAFKA_BROKERS="+strings.Join(br.Addrs(), ","))
		stderr := &syncbuf.Buffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{name: name, cmd: cmd, stderr: stderr, done: make(chan error, 1)}
		go func() { p.done <- cmd.Wait() }()
		procs = append(procs, p)
		return p
	}
	defer func() {
		for _, p := range procs {
			_ = p.cmd.Process.Kill() // no-op for those that exited
		}
		for _, p := range procs {
			<-p.done
		}
	}()
	dumpLogs := func() {
		for _, p := range procs {
			t.Logf("stderr of %s (last 4000 bytes):\n%s", p.name, syncbuf.Tail(p.stderr.String(), 4000))
		}
	}
	for i := 0; i < 3; i++ {
		startRelay(fmt.Sprintf("proc-%d", i))
	}

	// The writers: each key's events in sequence, one transaction each,
	// while the relays run; a few transactions roll back.
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	// The writers write half their events, wait for the kill, and write
	// the rest while the replacement starts: later events of keys whose
	// earlier events the killed relay had claimed.
	resume := make(chan struct{})
	var resumeOnce sync.Once
	resumeWriters := func() { resumeOnce.Do(func() { close(resume) }) }
	var (
		wg          sync.WaitGroup
		writesDone  atomic.Bool
		rolledBack  atomic.Int64
		writeErrs   = make(chan error, writers)
		writeFailed atomic.Bool
	)
	rollback := func(key string, commitMeanwhile func() error) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // rolled back below
		msg := outbox.Message{Topic: topic, Key: []byte(key), Payload: fmt.Appendf(nil, "%s:rolledback", key)}
		if _, err := w.Write(ctx, tx, msg); err != nil {
			return err
		}
		if commitMeanwhile != nil {
			// The open transaction is older than the next committed event:
			// ordered claims must wait for it, then find nothing of it.
			if err := commitMeanwhile(); err != nil {
				return err
			}
		}
		rolledBack.Add(1)
		return tx.Rollback(ctx)
	}
	event := func(key string, seq int) outbox.Message {
		return outbox.Message{Topic: topic, Key: []byte(key), Payload: fmt.Appendf(nil, "%s:%d", key, seq)}
	}
	for wr := 0; wr < writers; wr++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(err error) {
				writeFailed.Store(true)
				writeErrs <- err
			}
			// Half the writers write each key's events back to back (a
			// claim then holds several events of one key), the other half
			// round robin over their keys (each key's events are spread
			// over the whole writing time, across many claims).
			var order [][2]int // (key, seq) in writing order
			for k := wr; k < keys; k += writers {
				for seq := 0; seq < perKey; seq++ {
					order = append(order, [2]int{k, seq})
				}
			}
			if wr%2 == 1 {
				slices.SortStableFunc(order, func(a, b [2]int) int { return cmp.Compare(a[1], b[1]) })
			}
			for i, ks := range order {
				if i == len(order)/2 {
					<-resume // the second half after the kill
				}
				k, seq := ks[0], ks[1]
				key := fmt.Sprintf("key-%03d", k)
				write := func() error {
					_, err := w.Write(ctx, pool, event(key, seq))
					return err
				}
				var err error
				if k%rollbackEvery == rollbackEvery-1 && seq == rollbackAtSeq {
					err = rollback(key, write)
				} else {
					err = write()
				}
				if err != nil {
					fail(fmt.Errorf("write %s:%d: %w", key, seq, err))
					return
				}
			}
			if wr < rolledBackOnlyKeys {
				if err := rollback(fmt.Sprintf("rolledback-%d", wr), nil); err != nil {
					fail(err)
				}
			}
		}()
	}
	defer wg.Wait() // before the pool closes, should the test end early
	defer resumeWriters()
	go func() {
		wg.Wait()
		writesDone.Store(true)
		close(writeErrs)
	}()

	// count counts the outbox rows matching where, or those of another
	// relation when one is given.
	count := func(where string, from ...string) int {
		t.Helper()
		rel := table.Ident()
		if len(from) > 0 {
			rel = from[0]
		}
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+rel+" WHERE "+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	statuses := func() string {
		rows, err := pool.Query(ctx, "SELECT status, count(*) FROM "+table.Ident()+" GROUP BY 1 ORDER BY 1")
		if err != nil {
			return err.Error()
		}
		defer rows.Close()
		var parts []string
		for rows.Next() {
			var s string
			var n int
			if err := rows.Scan(&s, &n); err != nil {
				return err.Error()
			}
			parts = append(parts, fmt.Sprintf("%s=%d", s, n))
		}
		return strings.Join(parts, " ")
	}
	// poll calls cond every interval until it holds or the deadline passes.
	poll := func(timeout, interval time.Duration, cond func() bool) bool {
		deadline := time.Now().Add(timeout)
		for !cond() {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(interval)
		}
		return true
	}

	// Kill one relay in the middle of a batch: once some events went out,
	// freeze it with SIGSTOP when it holds claimed rows, let the statements
	// it already sent finish, check that it still holds rows, and SIGKILL
	// it; if it slipped out of its batch first, let it go on and try again.
	victim := procs[1]
	// Its claimed rows stay pending, noted in the shard row it holds
	// (docs/ordering.md#claims-that-read).
	victimRows := "status = 'pending' AND id IN (SELECT unnest(claimed) FROM " + table.Related("shard_ranges") +
		" WHERE locked_by LIKE '" + victim.name + "#%')"
	// mayDuplicate holds the rows the victim had claimed, read when it was
	// caught and again after the kill: its shards' leases (2s) may lapse
	// before the kill on a busy machine, and another relay then takes them.
	mayDuplicate := map[string]bool{}
	noteVictimRows := func() int {
		idRows, err := pool.Query(ctx, "SELECT id::text FROM "+table.Ident()+" WHERE "+victimRows)
		if err != nil {
			t.Fatal(err)
		}
		defer idRows.Close()
		n := 0
		for idRows.Next() {
			var id string
			if err := idRows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			mayDuplicate[id] = true
			n++
		}
		if err := idRows.Err(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	stranded, tries := 0, 0
	if !poll(2*time.Minute, 2*time.Millisecond, func() bool {
		if writeFailed.Load() {
			t.Fatalf("writing failed: %v", firstErr(writeErrs))
		}
		if count("status = 'sent'") < killAfter || count(victimRows) == 0 {
			return false
		}
		tries++
		if err := syscall.Kill(victim.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if !poll(time.Minute, time.Millisecond, func() bool {
			return count("application_name = '"+victim.name+"' AND state = 'active'", "pg_stat_activity") == 0
		}) {
			t.Fatalf("%s's statements still run a minute after SIGSTOP", victim.name)
		}
		if stranded = noteVictimRows(); stranded > 0 {
			return true
		}
		if err := syscall.Kill(victim.cmd.Process.Pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		return false
	}) {
		dumpLogs()
		t.Fatalf("could not catch %s holding claimed rows after %d events were sent (%d tries; %s); write error: %v",
			victim.name, killAfter, tries, statuses(), firstErr(writeErrs))
	}
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-victim.done; err == nil {
		t.Fatalf("%s exited 0 after SIGKILL", victim.name)
	}
	victim.done <- nil // for the deferred cleanup
	if n := count(victimRows); n != stranded {
		t.Logf("note: %d of %s's rows were claimed when it froze, %d after the kill", stranded, victim.name, n)
	}
	// The only ambiguity the faults create: what the victim had claimed
	// may have been published without being marked sent. (A refused
	// produce appends nothing.)
	noteVictimRows()
	t.Logf("killed %s at %s (try %d) holding %d claimed rows, with half the events written; sent so far %d; %s",
		victim.name, elapsed(), tries, count(victimRows), count("status = 'sent'"), statuses())
	resumeWriters()
	startRelay("proc-3")

	// The writers finish; then every committed event must be sent.
	if !poll(2*time.Minute, 20*time.Millisecond, writesDone.Load) {
		t.Fatalf("writers did not finish within 2m; write error: %v", firstErr(writeErrs))
	}
	if err := firstErr(writeErrs); err != nil {
		t.Fatal(err)
	}
	t.Logf("writers done at %s: %d committed, %d rolled back", elapsed(), total, rolledBack.Load())
	if n := count("true"); n != total {
		t.Fatalf("%d rows in the table, want %d committed (rolled-back transactions must leave none)", n, total)
	}
	// Ordered delivery waits for every older writing transaction on the
	// server, in any database (docs/ordering.md): note the longest one
	// seen, as other tests sharing the server can slow this one down.
	var longestTx time.Duration
	var longestWho string
	watchHorizon := func() {
		var age float64
		var who string
		err := pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - xact_start), 0)::float8,
       coalesce(datname, '') || ' ' || coalesce(application_name, '') || ': ' || left(query, 60)
FROM pg_stat_activity
WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
ORDER BY xact_start LIMIT 1`).Scan(&age, &who)
		if err == nil && time.Duration(age*float64(time.Second)) > longestTx {
			longestTx, longestWho = time.Duration(age*float64(time.Second)), who
		}
	}
	// awaitSent waits until n rows are sent, failing the test when a row
	// fails or the deadline passes.
	awaitSent := func(n int) {
		t.Helper()
		var failed int
		if !poll(2*time.Minute, 20*time.Millisecond, func() bool {
			watchHorizon()
			if failed = count("status = 'failed'"); failed > 0 {
				return true
			}
			return count("status = 'sent'") == n
		}) {
			dumpLogs()
			t.Fatalf("not all %d sent within the deadline: %s; longest writing transaction seen elsewhere on the server: %s (%s)",
				n, statuses(), longestTx.Round(time.Millisecond), longestWho)
		}
		if failed > 0 {
			var why string
			_ = pool.QueryRow(ctx, "SELECT coalesce(last_error, '') FROM "+table.Ident()+" WHERE status = 'failed' LIMIT 1").Scan(&why)
			dumpLogs()
			t.Fatalf("%d rows failed (e.g. %q): %s", failed, why, statuses())
		}
	}
	awaitSent(total)
	sentAt := elapsed()

	// Overlapping transactions, once the backlog is gone (so that a relay
	// that ignored an open older transaction would show it at once): one
	// transaction writes the first event of each overlap key and stays
	// open while each key's second event is written and committed.
	older, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer older.Rollback(ctx) //nolint:errcheck // committed below
	for i := 0; i < overlapKeys; i++ {
		if _, err := w.Write(ctx, older, event(fmt.Sprintf("overlap-%d", i), 0)); err != nil {
			t.Fatal(err)
		}
	}
	var newer []string
	for i := 0; i < overlapKeys; i++ {
		res, err := w.Write(ctx, pool, event(fmt.Sprintf("overlap-%d", i), 1))
		if err != nil {
			t.Fatal(err)
		}
		newer = append(newer, "'"+res.ID.String()+"'")
	}
	// A correct relay leaves the second events pending until the older
	// transaction ends: the wait is expected to time out.
	if poll(overlapHold, 5*time.Millisecond, func() bool {
		return count("id IN ("+strings.Join(newer, ",")+") AND status <> 'pending'") > 0
	}) {
		t.Errorf("an event was claimed while an older transaction writing its key was still open: %s",
			statuses())
	}
	if err := older.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	awaitSent(total + 2*overlapKeys)
	t.Logf("all %d sent at %s (overlap events at %s); produce requests %d, refused %d (%.1f%%, %d streaks); rows claimed more than once %d",
		total, sentAt, elapsed(), produces.Load(), refused.Load(), 100*float64(refused.Load())/float64(max(produces.Load(), 1)), streaks.Load(),
		count("attempt > 1"))

	if longestTx > time.Second {
		t.Logf("ordered delivery was held back by a writing transaction open for %s elsewhere on the server (%s)", longestTx.Round(time.Millisecond), longestWho)
	}
	if refused.Load() == 0 {
		t.Errorf("no produce request was refused: the fault injection did not work")
	}
	perReplica := map[string]int{}
	for _, p := range procs {
		perReplica[p.name] = count("status = 'sent' AND locked_by LIKE '" + p.name + "#%'")
	}
	t.Logf("rows sent per replica (by the last claim): %v", perReplica)
	if perReplica["proc-3"] == 0 {
		t.Errorf("the replacement relay sent nothing: %v", perReplica)
	}

	// SIGTERM the live relays: they exit 0.
	for _, p := range procs {
		if p == victim {
			continue
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range procs {
		if p == victim {
			continue
		}
		select {
		case err := <-p.done:
			p.done <- err // for the deferred cleanup
			if err != nil {
				t.Errorf("%s exited with %v after SIGTERM; stderr:\n%s", p.name, err, syncbuf.Tail(p.stderr.String(), 4000))
			}
		case <-time.After(time.Minute):
			t.Errorf("%s did not exit within a minute of SIGTERM", p.name)
		}
	}

	// Read the topic back and check it.
	recs := kafkatest.ReadTopic(t, br.Addrs(), topic, nil)
	var live, overlapping []kafkatest.Record
	for _, r := range recs {
		switch {
		case strings.HasSuffix(string(r.Value), ":rolledback") || strings.HasPrefix(string(r.Key), "rolledback-"):
			t.Errorf("event of a rolled-back transaction arrived: key %q value %q", r.Key, r.Value)
		case strings.HasPrefix(string(r.Key), "overlap-"):
			overlapping = append(overlapping, r)
		default:
			live = append(live, r)
		}
	}
	dups := kafkatest.CheckKeyOrder(t, live, keys, perKey)
	dups += kafkatest.CheckKeyOrder(t, overlapping, overlapKeys, 2)

	// Duplicates only from real ambiguity: the killed relay's claimed
	// rows, or a lease a live relay lost (which it logs).
	copies := map[string]int{}
	for _, r := range recs {
		copies[r.EventID()]++
	}
	var unexplained []string
	for id, n := range copies {
		if n > 1 && !mayDuplicate[id] {
			unexplained = append(unexplained, fmt.Sprintf("%s x%d", id, n))
		}
	}
	if len(unexplained) > 0 {
		leaseLost := false
		for _, p := range procs {
			leaseLost = leaseLost || strings.Contains(p.stderr.String(), "lease lost")
		}
		report := t.Errorf
		if leaseLost {
			report = t.Logf // a relay lost a lease: a real ambiguity
		} else {
			for _, p := range procs { // what the relays warned of, to tell where the copies came from
				var warned []string
				for _, l := range strings.Split(p.stderr.String(), "\n") {
					if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
						warned = append(warned, l)
					}
				}
				t.Logf("%s warned %d times; the last: %s", p.name, len(warned), strings.Join(warned[max(0, len(warned)-20):], "\n"))
			}
		}
		slices.Sort(unexplained)
		report("%d events arrived more than once though the killed relay had not claimed them (lease lost logged: %t): %v",
			len(unexplained), leaseLost, unexplained[:min(len(unexplained), 10)])
	}
	t.Logf("%d records read back for %d events: %d duplicates, of the %d events the killed relay had claimed; took %s",
		len(recs), total+2*overlapKeys, dups, len(mayDuplicate), elapsed())
}

// firstErr returns the first error in errs without blocking, or nil.
func firstErr(errs chan error) error {
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
