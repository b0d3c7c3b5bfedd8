package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// shutdownBound is what a relay may take beyond --shutdown-timeout to exit
// after SIGTERM, whatever the sink or the database does.
const shutdownBound = 2 * time.Second

// exitSlack is what the test allows beyond shutdownBound: a busy machine
// fires the relay's timers late. A relay that missed a bound would wait
// for the lease (30s), PublishTimeout (1m) or for ever.
const exitSlack = 15 * time.Second

// The binary, sent SIGTERM while the broker or the database has stopped
// answering (connections stay open, requests hang) or is gone
// (connections reset, new ones refused), exits within --shutdown-timeout +
// 2s. When the database still answers, the rows it held are given back.
func TestSIGTERMExitsInTimeWhateverTheSinkOrDatabaseDoes(t *testing.T) {
	t.Parallel()
	for _, fault := range []struct {
		name string
		// db is true when the fault leaves the database answering: the
		// rows the relay held must then be given back.
		db bool
		// apply breaks the broker's proxy or the database's while the
		// relay works on rows written just before (write) and waits until
		// it holds some (holding).
		apply func(broker, db *faultproxy.Proxy, write func(int), holding func())
	}{
		{"broker stalled", true, func(b, _ *faultproxy.Proxy, write func(int), holding func()) {
			b.Stall()
			write(200)
			holding() // publishing into the stalled broker
		}},
		{"broker gone", true, func(b, _ *faultproxy.Proxy, write func(int), _ func()) {
			b.Cut()
			write(200)
		}},
		// The database fails while the relay publishes to a slow broker:
		// recording the outcome hangs or fails.
		{"database stalled", false, func(b, d *faultproxy.Proxy, write func(int), holding func()) {
			b.Slow(time.Second)
			write(200)
			holding()
			d.Stall()
		}},
		{"database gone", false, func(b, d *faultproxy.Proxy, write func(int), holding func()) {
			b.Slow(time.Second)
			write(200)
			holding()
			d.Cut()
		}},
	} {
		t.Run(fault.name, func(t *testing.T) {
			t.Parallel()
			testSIGTERMUnderFault(t, fault.apply, fault.db)
		})
	}
}

func testSIGTERMUnderFault(t *testing.T, fault func(broker, db *faultproxy.Proxy, write func(int), holding func()), dbAnswers bool) {
	pool, table := testdb.New(t)
	bin := buildBinary(t)
	const topic = "stall.test"
	var brokerProxy *faultproxy.Proxy
	br, err := kfakebroker.Start(kfakebroker.Options{
		Topics: []string{topic},
		Listen: func(network, address string) (net.Listener, error) {
			ln, err := faultproxy.Listen(network, address)
			if err != nil {
				return nil, err
			}
			brokerProxy = ln.Proxy
			return ln, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(br.Close)
	dbURL, err := url.Parse(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	dbProxy, err := faultproxy.Start(dbURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dbProxy.Close() })
	dbURL.Host = dbProxy.Addr()

	write := func(n int) {
		t.Helper()
		w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%10), Payload: fmt.Appendf(nil, "event %d", i)}
		}
		if _, err := w.WriteBatch(context.Background(), pool, msgs); err != nil {
			t.Fatal(err)
		}
	}
	write(200)

	const shutdownTimeout = 3 * time.Second
	cmd := exec.Command(bin, "run", "--kafka-brokers", strings.Join(br.Addrs(), ","),
		"--batch-size", "50", "--poll-interval", "20ms", "--shutdown-timeout", shutdownTimeout.String(), "--log-format", "json")
	cmd.Env = append(os.Environ(), "OUTBOX_DATABASE_URL="+dbURL.String(), "OUTBOX_SCHEMA="+table.Schema)
	var out strings.Builder
	output := &lockedBuilder{b: &out}
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	exited := make(chan struct{})
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	testdb.AwaitSent(t, pool, table, 200, 30*time.Second)

	fault(brokerProxy, dbProxy, write, func() {
		awaitCount(t, pool, table, "status = 'processing'", func(n int) bool { return n > 0 }, 30*time.Second)
	})

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("relay did not exit within 60s of SIGTERM; output:\n%s", output.String())
	}
	took := time.Since(start)
	t.Logf("exited %v after SIGTERM (--shutdown-timeout %v)", took.Round(time.Millisecond), shutdownTimeout)
	if took > shutdownTimeout+shutdownBound+exitSlack {
		t.Errorf("relay took %v to exit after SIGTERM, want --shutdown-timeout + %v = %v (and at most %v more on a busy machine); output:\n%s",
			took, shutdownBound, shutdownTimeout+shutdownBound, exitSlack, output.String())
	}
	if !dbAnswers {
		return // what it held returns when the lease ends
	}
	if exitErr != nil {
		t.Errorf("relay exited with %v after SIGTERM, want status 0; output:\n%s", exitErr, output.String())
	}
	// The rows it held are back: pending, their attempt given back.
	var processing, unsentAttempted int
	if err := pool.QueryRow(context.Background(), `SELECT
	    count(*) FILTER (WHERE status = 'processing'),
	    count(*) FILTER (WHERE status = 'pending' AND attempt > 0)
	FROM `+table.Ident()).Scan(&processing, &unsentAttempted); err != nil {
		t.Fatal(err)
	}
	if processing != 0 || unsentAttempted != 0 {
		t.Errorf("after exit: %d rows processing, %d pending with an attempt spent; want 0 and 0 (released)", processing, unsentAttempted)
	}
}

// awaitCount polls the number of table rows matching where until ok
// accepts it, and fails the test with the last count after within.
func awaitCount(t *testing.T, pool *pgxpool.Pool, table outbox.Table, where string, ok func(int) bool, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table.Ident()+" WHERE "+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if ok(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows with %s after %v", n, where, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
