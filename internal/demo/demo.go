// Package demo runs the end-to-end demonstration behind `relay demo`: it
// migrates an outbox table on a real PostgreSQL (or MySQL/MariaDB, for a
// mysql:// URL), prepares the destination of its topic on a sink with the
// sink's reader from the registry (internal/sinks), writes orders and
// their events in real transactions (some rolled back), runs several
// relays side by side that publish with the real sink, reads the
// destination back with the broker's own client and proves that every
// committed event arrived intact and no rolled-back one did. With
// Config.Inbox a consumer then applies every event through an inbox
// (package inbox), twice delivered, and proves that each had one effect.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
	"github.com/outboxrelay/outboxrelay/internal/sinks"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// Config configures a demo run.
type Config struct {
	// DatabaseURL is the PostgreSQL to use, or a mysql:// (or mariadb://)
	// URL for MySQL 8.0.13+ or MariaDB 10.6+. Required.
	DatabaseURL string
	// Schema is created afresh (dropped first if present); on MySQL it is a database.
	Schema string
	// Sink reads Topic back: Run prepares, reads and removes its
	// destination; the caller closes Sink after Run. Required.
	Sink sinks.Reader
	// Publisher returns a new publisher for the relay configured by rc,
	// one per relay: the sink the relays publish to, configured to reach
	// what Sink prepared. Run closes each. Required.
	Publisher func(rc relay.Config) (publishers.Publisher, error)
	// Topic receives the events.
	Topic string
	// Events is how many events the writers attempt, committed or not.
	Events int
	// Writers is the number of concurrent writer goroutines.
	Writers int
	// Relays is the number of relay replicas.
	Relays int
	// RollbackEvery rolls back one transaction in this many.
	RollbackEvery int
	// Ordered runs the relays with per-key ordering on and checks that each
	// customer's events arrived in write order.
	Ordered bool
	// Inbox adds a consumer that applies each event through an inbox
	// (package inbox), reading the topic from its beginning twice, and
	// checks that each committed event had one effect. The Sink must read
	// a destination again from its beginning (Kafka, NATS, Redis).
	Inbox bool
	// Timeout bounds the whole run.
	Timeout time.Duration
	// Out receives progress lines and the summary.
	Out io.Writer
	// Logger receives the relays' logs.
	Logger *slog.Logger
}

// Summary is the outcome of a run.
type Summary struct {
	Committed, RolledBack      int
	Delivered, Duplicates      int
	Missing, RolledBackArrived int
	Corrupted                  int
	// Ordered says the run checked per-key order; OrderViolations counts
	// events that arrived (first copies) out of their key's write order.
	Ordered         bool
	OrderViolations int
	// Inbox is what the inbox consumer did, with Config.Inbox.
	Inbox       *InboxSummary
	SentByRelay map[string]int
	Elapsed     time.Duration
}

// OK reports whether the run proved the promise.
func (s Summary) OK() bool {
	return s.Committed > 0 && s.Missing == 0 && s.RolledBackArrived == 0 && s.Corrupted == 0 && s.OrderViolations == 0 &&
		(s.Inbox == nil || s.Inbox.ok(s.Committed))
}

// written is what the writers recorded of one event.
type written struct {
	key, payload string
	committed    bool
}

// Run executes the demo and returns its summary; the error is non-nil when
// something kept the demo from running or the summary is not OK.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	out := cfg.Out

	var db backend
	var err error
	if mysqldsn.IsURL(cfg.DatabaseURL) {
		db, err = openMySQL(ctx, cfg)
	} else {
		db, err = openPostgres(ctx, cfg)
	}
	if err != nil {
		return Summary{}, err
	}
	defer db.close()

	col := newCollector()
	desc, err := cfg.Sink.Prepare(ctx, cfg.Topic)
	if err != nil {
		return Summary{}, err
	}
	fmt.Fprintln(out, desc)
	defer col.read(ctx, cfg.Sink, cfg.Topic, cfg.Logger)() // until Run returns

	relayCtx, stopRelays := context.WithCancel(ctx)
	var relays sync.WaitGroup
	defer func() { stopRelays(); relays.Wait() }() // on an early return; a no-op after the explicit stop
	for i := 1; i <= cfg.Relays; i++ {
		rcfg := cfg.RelayConfig(i)
		pub, err := cfg.Publisher(rcfg)
		if err != nil {
			return Summary{}, fmt.Errorf("sink: %w", err)
		}
		r, err := db.newRelay(pub, rcfg)
		if err != nil {
			_ = pub.Close()
			return Summary{}, err
		}
		relays.Add(1)
		go func() {
			defer relays.Done()
			defer pub.Close()
			if err := r.Run(relayCtx); err != nil {
				cfg.Logger.Error("relay stopped", "error", err)
			}
		}()
	}
	if cfg.Ordered {
		fmt.Fprintf(out, "relays:   %d replicas, per-key ordered delivery over 8 shards\n", cfg.Relays)
	} else {
		fmt.Fprintf(out, "relays:   %d replicas claiming with FOR UPDATE SKIP LOCKED\n", cfg.Relays)
	}

	events := writeEvents(ctx, db, cfg)
	committed := 0
	for _, w := range events {
		if w.committed {
			committed++
		}
	}
	fmt.Fprintf(out, "writers:  done: %d events committed, %d rolled back\n", committed, len(events)-committed)

	// Wait until every committed event has arrived, printing progress.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for col.countKnown(events) < committed && ctx.Err() == nil {
		select {
		case <-tick.C:
			fmt.Fprintf(out, "progress: %d of %d committed events delivered\n", col.countKnown(events), committed)
		case <-col.changed():
		case <-ctx.Done():
		}
	}
	stopRelays()
	relays.Wait()
	// Anything a rolled-back transaction wrote would have been published by
	// now; read what is left on the wire.
	col.drain(500 * time.Millisecond)

	sum := summarize(events, col.snapshot())
	sum.Elapsed = time.Since(start)
	sum.SentByRelay, err = db.sentByRelay(context.WithoutCancel(ctx))
	if err != nil {
		return sum, err
	}
	if sum.Ordered = cfg.Ordered; cfg.Ordered {
		if sum.OrderViolations, err = db.orderViolations(context.WithoutCancel(ctx), col.arrivals()); err != nil {
			return sum, err
		}
	}
	if cfg.Inbox {
		is, err := consume(ctx, cfg, db)
		if err != nil && ctx.Err() == nil {
			return sum, err
		}
		sum.Inbox = &is // short of the events when time ran out
	}
	printSummary(out, sum)
	if !sum.OK() {
		if ctx.Err() != nil {
			return sum, fmt.Errorf("demo timed out after %v: %w", cfg.Timeout, ctx.Err())
		}
		return sum, errors.New("demo failed: see the summary")
	}
	return sum, nil
}

// RelayConfig returns the configuration of relay n (1 to Relays), as Run
// runs it: table Schema.outbox, ID demo-relay-n, batches of 100, polls
// every 50 ms, per-key ordering of every topic over 8 shards with Ordered.
func (cfg Config) RelayConfig(n int) relay.Config {
	rc := relay.Config{
		Table: outbox.Table{Schema: cfg.Schema, Name: "outbox"}, ID: fmt.Sprintf("demo-relay-%d", n), BatchSize: 100,
		PollInterval: 50 * time.Millisecond, Logger: cfg.Logger,
	}
	if cfg.Ordered {
		rc.Ordering = relay.Ordering{Topics: []string{"*"}, Shards: 8}
	}
	return rc
}

// prepareSchema drops and recreates the demo schema, migrates the outbox
// table (prepared for ordered delivery when ordered, as `relay migrate up
// --ordered` does) and creates the business table the writers insert
// orders into.
func prepareSchema(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, ordered bool) error {
	schema := pgx.Identifier{table.Schema}.Sanitize()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		return fmt.Errorf("drop demo schema: %w", err)
	}
	if _, err := migrations.Up(ctx, pool, table); err != nil {
		return err
	}
	if ordered {
		if _, err := migrations.PrepareOrdered(ctx, pool, table); err != nil {
			return err
		}
	}
	_, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.orders (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer    text   NOT NULL,
    amount_cents integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil {
		return fmt.Errorf("create demo orders table: %w", err)
	}
	return nil
}

// writeEvents runs the writers: each transaction inserts an order and one
// to three events about it; one in RollbackEvery is rolled back.
func writeEvents(ctx context.Context, db backend, cfg Config) map[string]written {
	var (
		mu     sync.Mutex
		events = map[string]written{}
		budget atomic.Int64
		wg     sync.WaitGroup
		txn    atomic.Int64
	)
	budget.Store(int64(cfg.Events))
	for g := 0; g < cfg.Writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n := 1 + rand.IntN(3)
				if budget.Add(int64(-n)) < 0 {
					return
				}
				rollback := txn.Add(1)%int64(cfg.RollbackEvery) == 0
				got, err := db.writeOrder(ctx, cfg.Topic, n, rollback)
				if err != nil {
					cfg.Logger.Error("writer transaction failed", "error", err)
					continue
				}
				mu.Lock()
				for id, e := range got {
					events[id] = e
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return events
}

func writeOrder(ctx context.Context, pool *pgxpool.Pool, w *outbox.Writer, orders, topic string, n int, rollback bool) (map[string]written, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	customer := fmt.Sprintf("customer-%03d", rand.IntN(200))
	var orderID int64
	if err := tx.QueryRow(ctx, "INSERT INTO "+orders+" (customer, amount_cents) VALUES ($1, $2) RETURNING id",
		customer, 100+rand.IntN(100000)).Scan(&orderID); err != nil {
		return nil, err
	}
	msgs := orderEvents(topic, customer, orderID, n)
	results, err := w.WriteBatch(ctx, tx, msgs)
	if err != nil {
		return nil, err
	}
	got := writtenOf(results, msgs, customer, rollback)
	if rollback {
		return got, tx.Rollback(ctx)
	}
	return got, tx.Commit(ctx)
}

// orderEvents returns the n (1 to 3) events of an order of customer.
func orderEvents(topic, customer string, orderID int64, n int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		kind := []string{"order.created", "order.paid", "order.shipped"}[i]
		msgs[i] = outbox.Message{
			Topic:   topic,
			Key:     []byte(customer),
			Payload: fmt.Appendf(nil, `{"order_id":%d,"event":%q,"customer":%q}`, orderID, kind, customer),
			Headers: map[string]string{"event-type": kind, "order-id": fmt.Sprint(orderID)},
		}
	}
	return msgs
}

// writtenOf records what a transaction wrote: results of msgs, by id.
func writtenOf(results []outbox.Result, msgs []outbox.Message, customer string, rollback bool) map[string]written {
	got := make(map[string]written, len(results))
	for i, r := range results {
		got[r.ID.String()] = written{key: customer, payload: string(msgs[i].Payload), committed: !rollback}
	}
	return got
}

// summarize compares what was written with what arrived.
func summarize(events map[string]written, arrived map[string][]received) Summary {
	var s Summary
	for id, w := range events {
		got := arrived[id]
		if w.committed {
			s.Committed++
		} else {
			s.RolledBack++
		}
		switch {
		case len(got) == 0 && w.committed:
			s.Missing++
		case len(got) > 0 && !w.committed:
			s.RolledBackArrived++
		case len(got) > 0:
			s.Delivered++
			s.Duplicates += len(got) - 1
			for _, r := range got {
				if r.key != w.key || r.payload != w.payload {
					s.Corrupted++
				}
			}
		}
	}
	return s
}

func sentByRelay(ctx context.Context, pool *pgxpool.Pool, table outbox.Table) (map[string]int, error) {
	// locked_by is "<relay id>#<claim number>"; group by the relay.
	rows, err := pool.Query(ctx, "SELECT regexp_replace(locked_by, '#[0-9]+$', ''), count(*) FROM "+table.Ident()+" WHERE status = 'sent' GROUP BY 1")
	if err != nil {
		return nil, fmt.Errorf("count sent rows: %w", err)
	}
	out := map[string]int{}
	for rows.Next() {
		var who string
		var n int
		if err := rows.Scan(&who, &n); err != nil {
			return nil, err
		}
		out[who] = n
	}
	return out, rows.Err()
}

func printSummary(out io.Writer, s Summary) {
	verdict := "OK: every committed event arrived intact, no rolled-back event arrived"
	if s.Ordered {
		verdict += ", every key's events in write order"
	}
	if s.Inbox != nil {
		verdict += ", each applied once through the inbox"
	}
	if !s.OK() {
		verdict = "FAILED"
	}
	fmt.Fprintf(out, `
summary
  committed events           %d
  rolled-back events         %d
  delivered (distinct)       %d
  duplicates                 %d
  missing                    %d
  rolled-back but delivered  %d
  corrupted (key/payload)    %d
  elapsed                    %v
`, s.Committed, s.RolledBack, s.Delivered, s.Duplicates, s.Missing, s.RolledBackArrived, s.Corrupted, s.Elapsed.Round(time.Millisecond))
	if s.Ordered {
		fmt.Fprintf(out, "  per-key order violations   %d\n", s.OrderViolations)
	}
	for _, who := range slices.Sorted(maps.Keys(s.SentByRelay)) {
		fmt.Fprintf(out, "  sent by %-18s %d\n", who, s.SentByRelay[who])
	}
	if i := s.Inbox; i != nil {
		fmt.Fprintf(out, "inbox: delivered %d (%d duplicates), effects %d, duplicate effects %d\n", i.Delivered, i.Duplicates, i.Effects, i.DuplicateEffects)
	}
	fmt.Fprintln(out, verdict)
}

// orderViolations compares, per key, the order in which events first
// arrived with the order the database promises: the writing transaction,
// then the event id.
func orderViolations(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, arrived map[string][]string) (int, error) {
	rows, err := pool.Query(ctx, "SELECT convert_from(key, 'UTF8'), id::text FROM "+table.Ident()+" WHERE status = 'sent' ORDER BY tx, id")
	if err != nil {
		return 0, fmt.Errorf("read write order: %w", err)
	}
	position := map[string]int{} // event id -> position within its key
	counts := map[string]int{}
	for rows.Next() {
		var key, id string
		if err := rows.Scan(&key, &id); err != nil {
			return 0, err
		}
		position[id] = counts[key]
		counts[key]++
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	violations := 0
	for _, ids := range arrived {
		seen, next := map[string]bool{}, 0
		for _, id := range ids {
			if seen[id] {
				continue // a duplicate: only first copies count
			}
			seen[id] = true
			if p, ok := position[id]; ok {
				if p != next {
					violations++
				}
				next = p + 1
			}
		}
	}
	return violations, nil
}
