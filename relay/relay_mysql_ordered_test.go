package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// orderPublisher records, per key, the seq of each event it acknowledged
// (the payload), and fails an event's first try with a transient error
// when flaky says so.
type orderPublisher struct {
	mu    sync.Mutex
	got   map[string][]int64 // key -> seqs acknowledged, in order
	tried map[string]bool    // event ids tried once
	flaky func(outbox.Message) bool
}

func (p *orderPublisher) Publish(_ context.Context, msgs []outbox.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := make(publishers.Errors, len(msgs))
	for i, m := range msgs {
		id := m.ID.String()
		if !p.tried[id] && p.flaky != nil && p.flaky(m) {
			p.tried[id] = true
			errs[i] = errors.New("flaky sink")
			continue
		}
		p.tried[id] = true
		var seq int64
		fmt.Sscan(string(m.Payload), &seq)
		p.got[string(m.Key)] = append(p.got[string(m.Key)], seq)
	}
	return publishers.Summarize(errs)
}

func (p *orderPublisher) Close() error { return nil }

// orderedMySQL returns a migrated MariaDB database prepared for ordered
// delivery.
func orderedMySQL(t *testing.T) *sql.DB {
	t.Helper()
	db := mysqlDB(t)
	if _, err := migrations.PrepareOrderedMySQL(context.Background(), db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
	return db
}

// writeKeyed inserts an event of key into tx whose payload is its seq,
// known only at insert: the payload is set from the row afterwards.
func writeKeyed(ctx context.Context, tx *sql.Tx, key string) error {
	res, err := outbox.WriteBatch(ctx, outbox.FromMySQL(tx), []outbox.Message{{Topic: "orders", Key: []byte(key), Payload: []byte("?")}})
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, "UPDATE outbox SET payload = CAST(seq AS CHAR) WHERE id = ?", res[0].ID[:])
	return err
}

// writeTx writes an event of each of keys in one transaction, and rolls
// it back when rollback is set.
func writeTx(ctx context.Context, db *sql.DB, keys []string, rollback bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, k := range keys {
		if err := writeKeyed(ctx, tx, k); err != nil {
			return err
		}
	}
	if rollback {
		return tx.Rollback()
	}
	return tx.Commit()
}

// Ordered delivery on MariaDB: writers of shared keys in concurrent
// transactions (so a key's earlier write often commits after a later one
// began, the later waiting on the key's counter), a tenth of them rolled
// back, three relays serving the shards, a sink that fails a fifth of the
// first tries. Every key's events reach the sink in seq order, which is
// commit order, each committed event at least once, and none rolled back.
func TestOrderedOnMySQL(t *testing.T) {
	db := orderedMySQL(t)
	ctx := context.Background()
	const writers, txs, keys = 8, 40, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range txs {
				// Two keys in ascending order; a writer of several keys may
				// still be a deadlock victim on their first events (the
				// counter rows' gap locks), and tries again.
				a, b := rng.IntN(keys), rng.IntN(keys)
				ks := []string{fmt.Sprintf("k%02d", min(a, b)), fmt.Sprintf("k%02d", max(a, b))}
				rollback := rng.IntN(10) == 0
				for {
					err := writeTx(ctx, db, ks, rollback)
					var me *mysql.MySQLError
					if errors.As(err, &me) && me.Number == 1213 {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					break
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	pub := &orderPublisher{got: map[string][]int64{}, tried: map[string]bool{}, flaky: func(outbox.Message) bool { return rand.IntN(5) == 0 }}
	runRelays(t, db, pub, 3, Config{BatchSize: 20, BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		Ordering: Ordering{Topics: []string{"*"}, Shards: 4, Loops: 2}})
	checkKeyOrder(t, db, pub)
}

// runRelays runs n relays of cfg on db until every row is sent or
// failed.
func runRelays(t *testing.T, db *sql.DB, pub publishers.Publisher, n int, cfg Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	cfg.PollInterval = 10 * time.Millisecond
	for i := range n {
		c := cfg
		c.ID = fmt.Sprintf("r%d", i)
		r, err := NewMySQL(db, pub, c)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs <- r.Run(ctx) })
	}
	deadline := time.Now().Add(90 * time.Second)
	for countStatus(t, db, "pending")+countStatus(t, db, "processing") > 0 && time.Now().Before(deadline) && len(errs) == 0 {
		time.Sleep(20 * time.Millisecond) // polls the table's state: nothing to await but the rows
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// checkKeyOrder checks that the sink saw each key's events in seq order,
// the first copy of each before the next event, and every sent row.
func checkKeyOrder(t *testing.T, db *sql.DB, pub *orderPublisher) {
	t.Helper()
	rows, err := db.Query("SELECT `key`, seq, status FROM outbox ORDER BY `key`, seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	sent := map[string][]int64{}
	for rows.Next() {
		var k, status string
		var seq int64
		if err := rows.Scan(&k, &seq, &status); err != nil {
			t.Fatal(err)
		}
		if status != "sent" {
			t.Errorf("key %s seq %d is %s", k, seq, status)
		}
		sent[k] = append(sent[k], seq)
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	for k, want := range sent {
		var first []int64 // first copies, in the order the sink saw them
		seen := map[int64]bool{}
		for _, s := range pub.got[k] {
			if !seen[s] {
				seen[s] = true
				first = append(first, s)
			}
		}
		if fmt.Sprint(first) != fmt.Sprint(want) {
			t.Errorf("key %s: the sink saw %v, want %v", k, pub.got[k], want)
		}
	}
}

// An earlier write of a key commits after a later one began: the later
// writer waits on the key's counter until the earlier commits, and a
// running relay delivers the earlier first, delivering other keys
// meanwhile.
func TestOrderedOnMySQLEarlierCommitsLater(t *testing.T) {
	db := orderedMySQL(t)
	ctx := context.Background()
	pub := &orderPublisher{got: map[string][]int64{}, tried: map[string]bool{}}
	r, err := NewMySQL(db, pub, Config{ID: "r", PollInterval: 10 * time.Millisecond, Ordering: Ordering{Topics: []string{"orders"}, Shards: 2}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	t1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback() //nolint:errcheck // a no-op after Commit
	if err := writeKeyed(ctx, t1, "k"); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() { second <- writeTx(ctx, db, []string{"k"}, false) }()
	// Other keys flow while k's writers are open.
	if err := writeTx(ctx, db, []string{"other"}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		pub.mu.Lock()
		defer pub.mu.Unlock()
		return len(pub.got["other"]) == 1
	})
	select {
	case err := <-second:
		t.Fatalf("the later writer of k did not wait for the earlier: %v", err)
	default:
	}
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return countStatus(t, db, "sent") == 3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if fmt.Sprint(pub.got["k"]) != "[1 2]" {
		t.Fatalf("k arrived as %v, want [1 2]: the earlier write first", pub.got["k"])
	}
}

// waitFor waits up to a minute for cond.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within a minute")
		}
		time.Sleep(10 * time.Millisecond) // polls the sink's and the table's state
	}
}

// Writers in plain SQL (no id, the database's default; migration 004) get
// the same order on MariaDB, the topic ordered by a pattern (orders.*):
// single-row and multi-row INSERTs of several keys, in transactions one
// after another, reach the sink in each key's write order, which the
// payload numbers.
func TestOrderedOnMySQLPlainSQL(t *testing.T) {
	db := orderedMySQL(t)
	ctx := context.Background()
	const keys, perKey = 6, 12
	next := make([]int, keys)
	insert := func(tx *sql.Tx, ks ...int) {
		q, args := "INSERT INTO outbox (topic, `key`, payload) VALUES ", []any{}
		for i, k := range ks {
			if i > 0 {
				q += ", "
			}
			q += "('orders.created', ?, ?)"
			args = append(args, fmt.Sprintf("k%d", k), fmt.Sprint(next[k]))
			next[k]++
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	for round := range perKey / 2 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		insert(tx, round%keys)                 // one row
		insert(tx, 0, 1, 2, 3, 4, 5)           // every key in one statement
		insert(tx, (round+1)%keys, round%keys) // two keys, not in key order
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for k := range keys { // the rest, one a statement
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for next[k] < perKey+perKey/2 {
			insert(tx, k)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	pub := &orderPublisher{got: map[string][]int64{}, tried: map[string]bool{}, flaky: func(outbox.Message) bool { return rand.IntN(4) == 0 }}
	runRelays(t, db, pub, 2, Config{BatchSize: 5, BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		Ordering: Ordering{Topics: []string{"orders.*"}, Shards: 4, Loops: 2}})
	for k := range keys {
		got := pub.got[fmt.Sprintf("k%d", k)]
		for i, n := range got {
			if n != int64(i) {
				t.Errorf("key k%d reached the sink as %v, want 0 to %d in order", k, got, next[k]-1)
				break
			}
		}
		if len(got) != next[k] {
			t.Errorf("key k%d: %d events reached the sink, want %d", k, len(got), next[k])
		}
	}
}
