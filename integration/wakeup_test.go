package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// The relays here poll once a minute: only the notification sent at commit
// can make them claim within the test's deadlines.
const slowPoll = time.Minute

// A committed insert wakes an idle relay at once, in both claim paths, and
// after the listening session was killed the relay listens again.
func TestCommitWakesIdleRelay(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		name := "unordered"
		if ordered {
			name = "ordered"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cfg := relay.Config{PollInterval: slowPoll, ID: "waker"}
			if ordered {
				cfg.Ordering = relay.Ordering{Topics: []string{"*"}, Shards: 2}
			}
			s := &sink{}
			rr := b.startRelay(s, cfg)
			// The relay's first claims run at start; wait until its
			// listener is in place, then write.
			b.awaitListening()
			msg := outbox.Message{Topic: "orders", Key: []byte("k"), Payload: []byte("first")}
			id := b.write(msg)[0]
			// Well within the minute of a poll: an ordered row waits for
			// transactions of other tests on the server to end (the
			// horizon), and is looked for again at most a second apart.
			await(t, 30*time.Second, func() bool { return b.row(id).Status == "sent" }, "a commit did not wake the relay")

			// Kill the listening session: the relay reconnects, and the
			// next commit wakes it again.
			b.exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE $1`, "%"+b.table.Channel()+"%")
			b.awaitListening()
			msg.Payload = []byte("second")
			id = b.write(msg)[0]
			await(t, 30*time.Second, func() bool { return b.row(id).Status == "sent" }, "a commit after the reconnect did not wake the relay")
			if err := rr.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// With NoListen the relay does not hold a LISTEN session.
func TestNoListenHoldsNoSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := &sink{}
	rr := b.startRelay(s, relay.Config{NoListen: true})
	id := b.writeN(1, "orders", "polled")[0]
	await(t, 10*time.Second, func() bool { return b.row(id).Status == "sent" }, "polling relay did not send")
	if n := b.countActivity("query LIKE 'LISTEN %' AND query LIKE $1", "%"+b.table.Channel()+"%"); n != 0 {
		t.Fatalf("%d LISTEN sessions with NoListen", n)
	}
	if err := rr.stop(t); err != nil {
		t.Fatal(err)
	}
}

// Without notifications the relay polls adaptively: soon after a claim that
// found rows, backing off while it finds none. Its poll interval here is a
// minute, so only the short polls that follow found rows can send a stream
// of events one by one within the test's deadlines.
func TestNoListenRelayFollowsAStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.writeN(1, "stream", "first") // found by the first claim
	rr := b.startRelay(&sink{}, relay.Config{NoListen: true, PollInterval: slowPoll, PollMin: 5 * time.Millisecond, Workers: 1})
	for i := range 20 {
		id := b.writeN(1, "stream", fmt.Sprintf("e%d-", i))[0]
		await(t, 10*time.Second, func() bool { return b.row(id).Status == "sent" }, "event %d of the stream was not sent", i)
	}
	if err := rr.stop(t); err != nil {
		t.Fatal(err)
	}
}

// The trigger of migration 003 notifies the channel outbox.Table.Channel
// names, also for names beyond PostgreSQL's 63-byte limit, once per
// transaction, for single inserts and COPY alike.
func TestInsertNotifiesTheTablesChannel(t *testing.T) {
	t.Parallel()
	for _, long := range []bool{false, true} {
		t.Run(map[bool]string{false: "short name", true: "long name"}[long], func(t *testing.T) {
			t.Parallel()
			pool, table := testdb.NewEmpty(t)
			ctx := context.Background()
			if long {
				// 63 + 1 + 40 bytes: the channel name is cut and hashed.
				table = outbox.Table{Schema: table.Schema + strings.Repeat("s", 63-len(table.Schema)), Name: strings.Repeat("n", 40)}
				t.Cleanup(func() {
					_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{table.Schema}.Sanitize()+" CASCADE")
				})
				if len(table.Channel()) != 63 {
					t.Fatalf("channel %q is %d bytes, want 63", table.Channel(), len(table.Channel()))
				}
			}
			if _, err := migrations.Up(ctx, pool, table); err != nil {
				t.Fatal(err)
			}
			conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{table.Channel()}.Sanitize()); err != nil {
				t.Fatal(err)
			}
			w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			msgs := []outbox.Message{{Topic: "t", Payload: []byte("a")}, {Topic: "t", Payload: []byte("b")}}
			if _, err := w.WriteBatch(ctx, tx, msgs); err != nil { // COPY
				t.Fatal(err)
			}
			if _, err := w.Write(ctx, tx, outbox.Message{Topic: "t", Payload: []byte("c")}); err != nil { // INSERT
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			n, err := conn.WaitForNotification(wctx)
			if err != nil {
				t.Fatalf("no notification on %q: %v", table.Channel(), err)
			}
			if n.Channel != table.Channel() {
				t.Fatalf("notified %q, want %q", n.Channel, table.Channel())
			}
			// One per transaction: nothing else is queued.
			qctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if extra, err := conn.WaitForNotification(qctx); err == nil {
				t.Fatalf("second notification %+v for one transaction", extra)
			}
		})
	}
}

// awaitListening waits until one relay session LISTENs on the test table's
// channel.
func (b *bundle) awaitListening() {
	b.t.Helper()
	await(b.t, 10*time.Second, func() bool {
		return b.countActivity("query LIKE 'LISTEN %' AND usename = current_user AND query LIKE $1", "%"+b.table.Channel()+"%") == 1
	}, "no relay LISTENs on %s", b.table.Channel())
}
