package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/relay"
)

// orderedBenchMinEvents is the fewest events a burn-down writes outside the
// framework's one-op probe run: fewer give no meaningful rate.
const orderedBenchMinEvents = 20000

// BenchmarkOrderedVsUnordered measures burn-down throughput of ordered and
// unordered delivery, with 1 and 3 relays and 10, 1,000 and 100,000
// distinct keys. Run it with
//
//	go test ./integration -run '^$' -bench OrderedVsUnordered -benchtime 20000x -timeout 30m
//
// Each sub-benchmark writes max(b.N, 20,000) events of 200 bytes up front
// (keys assigned round-robin, so each key holds its events in sequence),
// then starts the relays, each with its own pool and Kafka publisher, and
// times them from their start until every row is sent. The figure is
// events/s (ns/op is per b.N and meaningless when b.N was raised to the
// floor); events/publish is the mean number of messages per Publish call.
// The modes of one (relays, keys) run next to each other: compare them as
// a ratio. mode=ordered publishes a key's claimed run in one call, as the
// Kafka sink allows (publishers.KeyBatcher); mode=ordered-per-key hides that
// from the relay, which then sends one event per key per call, as it does
// for sinks without it. See docs/benchmarks.md.
func BenchmarkOrderedVsUnordered(b *testing.B) {
	for _, relays := range []int{1, 3} {
		for _, keys := range []int{10, 1000, 100000} {
			for _, mode := range []string{"unordered", "ordered", "ordered-per-key"} {
				b.Run(fmt.Sprintf("mode=%s/relays=%d/keys=%d", mode, relays, keys), func(b *testing.B) {
					benchBurnDown(b, mode, relays, keys)
				})
			}
		}
	}
}

// countingPublisher counts Publish calls and messages on their way to the
// real sink.
type countingPublisher struct {
	publishers.Publisher
	calls, msgs *atomic.Int64
	perKey      bool // hide the sink's publishers.KeyBatcher
}

// KeyBatches answers for the real sink (publishers.KeyBatcher), unless perKey.
func (p countingPublisher) KeyBatches() bool {
	kb, ok := p.Publisher.(publishers.KeyBatcher)
	return ok && kb.KeyBatches() && !p.perKey
}

func (p countingPublisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	p.calls.Add(1)
	p.msgs.Add(int64(len(msgs)))
	return p.Publisher.Publish(ctx, msgs)
}

func benchBurnDown(b *testing.B, mode string, relays, keys int) {
	ctx := context.Background()
	n := b.N
	if n > 1 && n < orderedBenchMinEvents {
		n = orderedBenchMinEvents
	}
	const topic = "bench"

	pool, table := testdb.New(b)
	if mode != "unordered" { // as `relay migrate up --ordered` prepares it
		if _, err := migrations.PrepareOrdered(ctx, pool, table); err != nil {
			b.Fatal(err)
		}
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	for done := 0; done < n; done += 1000 {
		msgs := make([]outbox.Message, min(1000, n-done))
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: topic, Key: fmt.Appendf(nil, "key-%d", (done+i)%keys), Payload: benchPayload}
		}
		if _, err := w.WriteBatch(ctx, pool, msgs); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table.Ident()); err != nil {
		b.Fatal(err)
	}

	br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{topic}, Partitions: 3})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()

	// The relays report the rows they record sent; the database is asked
	// whether the table is drained once they report every row, and once a
	// second before that (a row sent twice is counted twice).
	var reported atomic.Int64
	allReported := make(chan struct{})
	var once sync.Once
	cfg := relay.Config{
		Table:        table,
		BatchSize:    500,
		PollInterval: 10 * time.Millisecond,
		Logger:       discardLogger(),
		Observer: relay.ObserverFunc(func(e relay.Event) {
			if e.Kind == relay.EventRecorded && reported.Add(int64(e.Result.Sent)) >= int64(n) {
				once.Do(func() { close(allReported) })
			}
		}),
	}
	if mode != "unordered" {
		cfg.Ordering = relay.Ordering{Topics: []string{"*"}, Shards: 16}
	}

	// Each relay is a replica of its own: its own pool and publisher. The
	// deferred stop cancels the relays, waits for them, and only then
	// closes their publishers and pools.
	var calls, published atomic.Int64
	runCtx, cancel := context.WithCancel(ctx)
	var dones []chan error
	var closers []func()
	defer func() {
		cancel()
		for i, done := range dones {
			select {
			case err := <-done:
				if err != nil {
					b.Errorf("relay %d: Run: %v", i, err)
				}
			case <-time.After(30 * time.Second):
				b.Errorf("relay %d: Run did not return within 30s of cancellation", i)
			}
		}
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	rs := make([]*relay.Relay, relays)
	for i := range rs {
		// Each relay's pool is configured as `relay run` configures its
		// own (relay.ConfigurePool).
		pcfg, err := pgxpool.ParseConfig(testdb.URL(b))
		if err != nil {
			b.Fatal(err)
		}
		relay.ConfigurePool(pcfg)
		rpool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			b.Fatal(err)
		}
		closers = append(closers, rpool.Close)
		pub, err := kafka.New(kafka.Config{Brokers: br.Addrs(), BatchSize: 500})
		if err != nil {
			b.Fatal(err)
		}
		closers = append(closers, func() {
			if err := pub.Close(); err != nil {
				b.Errorf("kafka publisher Close: %v", err)
			}
		})
		if rs[i], err = relay.New(rpool, countingPublisher{pub, &calls, &published, mode == "ordered-per-key"}, cfg); err != nil {
			b.Fatal(err)
		}
	}

	// The question reads the two partial indexes of unfinished rows rather
	// than counting sent rows; asked every few ms it would still take
	// CPU from the relays on a 2-vCPU machine, through the dead index
	// entries a drain leaves (more in the longer run), so it is asked
	// rarely: the run's end is the last row's sent_at, read afterwards.
	drained := "SELECT NOT EXISTS (SELECT 1 FROM " + table.Ident() + " WHERE status = 'pending')" +
		" AND NOT EXISTS (SELECT 1 FROM " + table.Ident() + " WHERE status = 'processing')"
	var started time.Time
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&started); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0, self0 := hostBusy(), selfCPU()
	for _, r := range rs {
		done := make(chan error, 1)
		dones = append(dones, done)
		go func() { done <- r.Run(runCtx) }()
	}
	deadline := time.Now().Add(20 * time.Minute)
	reportedAll, wait := allReported, time.Second
	for {
		select {
		case <-reportedAll:
			reportedAll, wait = nil, 3*time.Millisecond
		case <-time.After(wait):
		}
		var ok bool
		if err := pool.QueryRow(ctx, drained).Scan(&ok); err != nil {
			b.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("not drained after 20 minutes: %v", benchStatuses(b, pool, table))
		}
	}
	b.StopTimer()
	// CPU per event, of the whole machine (the database, the relays and
	// the broker, which share its two cores) and of this process (the
	// relays and the broker): a drain that saturates the machine runs at
	// the inverse of the first.
	cpu1, self1 := hostBusy(), selfCPU()
	if cpu0 > 0 && cpu1 > cpu0 {
		b.ReportMetric(float64(cpu1-cpu0)*1e4/float64(n), "host-us/event")
	}
	b.ReportMetric(float64(self1-self0)/1e3/float64(n), "self-us/event")
	// The database's clock, from the relays' start to the last row sent.
	var elapsed time.Duration
	if err := pool.QueryRow(ctx, "SELECT max(sent_at) - $1::timestamptz FROM "+table.Ident(), started).Scan(&elapsed); err != nil {
		b.Fatal(err)
	}

	var sent int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()+" WHERE status = 'sent'").Scan(&sent); err != nil {
		b.Fatal(err)
	}
	if sent != n {
		b.Fatalf("%d of %d rows sent: %v", sent, n, benchStatuses(b, pool, table))
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	if c := calls.Load(); c > 0 {
		b.ReportMetric(float64(published.Load())/float64(c), "events/publish")
	}
}

// benchStatuses counts rows by status, for failure messages.
func benchStatuses(b *testing.B, pool *pgxpool.Pool, table outbox.Table) map[string]int {
	rows, err := pool.Query(context.Background(), "SELECT status, count(*) FROM "+table.Ident()+" GROUP BY status")
	if err != nil {
		b.Errorf("count statuses: %v", err)
		return nil
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var s string
		var c int
		if err := rows.Scan(&s, &c); err != nil {
			b.Errorf("count statuses: %v", err)
			return nil
		}
		m[s] = c
	}
	if err := rows.Err(); err != nil {
		b.Errorf("count statuses: %v", err)
	}
	return m
}

// hostBusy returns the machine's busy CPU time in clock ticks (1/100 s)
// from /proc/stat, or 0 where there is none.
func hostBusy() int64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	var busy int64
	for i, v := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		x, _ := strconv.ParseInt(v, 10, 64)
		busy += x
	}
	return busy
}

// selfCPU returns the CPU time this process has used, in nanoseconds.
func selfCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
