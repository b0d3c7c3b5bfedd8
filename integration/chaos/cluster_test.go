package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/pgserver"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
)

// cluster is everything the run breaks: a private PostgreSQL server, a
// broker behind a fault proxy, and relay processes each behind its own
// PostgreSQL fault proxy.
type cluster struct {
	t   *testing.T
	bin string

	pg   *pgserver.Server
	pool *pgxpool.Pool // the harness's own connections, not proxied

	// sink is the broker the relays publish to; brokerProxy the fault
	// proxy in front of it.
	sink        sink
	brokerProxy *faultproxy.Proxy

	slots []*slot
	all   []*relayProc // every process started, for the cleanup
	// exits are the relays stopped by SIGTERM during the faults, with how
	// long each took to exit.
	exits []exit
}

// exit is one relay's exit after SIGTERM.
type exit struct {
	kind, name string
	took       time.Duration
}

// slot is one relay position: its PostgreSQL proxy outlives the processes
// that come and go in it.
type slot struct {
	index   int
	pgProxy *faultproxy.Proxy
	gen     int
	proc    *relayProc
}

// relayProc is one `relay run` process.
type relayProc struct {
	name   string
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	done   chan struct{}
	err    error // valid once done is closed
}

func (p *relayProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startCluster starts PostgreSQL, the sink's broker and its proxy,
// migrates the outbox table and starts p.relays relays.
func startCluster(ctx context.Context, t *testing.T, bin string, p profile, sk sink) *cluster {
	c := &cluster{t: t, bin: bin, sink: sk}
	var err error
	if c.pg, err = pgserver.Start(ctx, pgserver.Options{}); err != nil {
		t.Fatalf("private PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("PostgreSQL log (tail):\n%s", c.pg.LogTail(40))
		}
		if err := c.pg.Close(); err != nil {
			t.Errorf("stop private PostgreSQL: %v", err)
		}
	})
	if c.pool, err = pgxpool.New(ctx, c.pg.URL("postgres")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.pool.Close)

	c.brokerProxy = sk.start(ctx, t)

	if out, err := c.command(ctx, "migrate", "up").CombinedOutput(); err != nil {
		t.Fatalf("relay migrate up: %v\n%s", err, out)
	}
	for i := range p.relays {
		pr, err := faultproxy.Start(fmt.Sprintf("127.0.0.1:%d", c.pg.Port()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pr.Close() })
		c.slots = append(c.slots, &slot{index: i, pgProxy: pr})
	}
	t.Cleanup(c.killAll)
	for _, s := range c.slots {
		c.startRelay(s)
	}
	return c
}

// command is a relay command against the private server, not proxied.
func (c *cluster) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = append(os.Environ(), "OUTBOX_DATABASE_URL="+c.pg.URL("postgres"))
	return cmd
}

// startRelay starts a new relay process in s, connected to PostgreSQL
// through the slot's proxy and to the sink's broker through its proxy.
func (c *cluster) startRelay(s *slot) {
	s.gen++
	name := fmt.Sprintf("r%d.%d", s.index, s.gen)
	// Slot 2 takes lock claims, so that both claim modes meet the faults,
	// side by side on one table.
	claimMode := "lease"
	if s.index == 2 {
		claimMode = "lock"
	}
	dsn := fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&application_name=%s", s.pgProxy.Addr(), name)
	ordered, _ := c.sink.topics()
	sinkArgs, sinkEnv := c.sink.relayArgs()
	args := []string{"run",
		"--relay-id", name,
		"--ordered-topics", ordered, "--shards", "8",
		"--batch-size", "50", "--poll-interval", "50ms",
		"--lease", lease.String(), "--publish-timeout", publishTimeout.String(),
		"--backoff-min", "100ms", "--backoff-max", "2s", "--max-attempts", "25",
		"--outage-backoff-min", "50ms", "--outage-backoff-max", "1s",
		"--shutdown-timeout", shutdownTimeout.String(),
		// Odd slots run two batches in flight, so both loops meet the faults.
		"--workers", fmt.Sprint(1 + s.index%2),
		"--claim-mode", claimMode}
	cmd := exec.Command(c.bin, append(args, sinkArgs...)...)
	cmd.Env = append(append(os.Environ(), "OUTBOX_DATABASE_URL="+dsn), sinkEnv...)
	p := &relayProc{name: name, cmd: cmd, stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.proc = p
	c.all = append(c.all, p)
}

// killAll kills every relay process still running and waits for them.
func (c *cluster) killAll() {
	for _, p := range c.all {
		_ = p.cmd.Process.Kill()
	}
	for _, p := range c.all {
		<-p.done
	}
}

// stopAll sends SIGTERM to every live relay and expects each to exit 0.
func (c *cluster) stopAll() {
	for _, s := range c.slots {
		if !s.proc.exited() {
			_ = s.proc.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, s := range c.slots {
		select {
		case <-s.proc.done:
			if s.proc.err != nil {
				c.t.Errorf("%s exited with %v after SIGTERM; stderr:\n%s", s.proc.name, s.proc.err, syncbuf.Tail(s.proc.stderr.String(), 3000))
			}
		case <-time.After(30 * time.Second):
			c.t.Errorf("%s did not exit within 30s of SIGTERM", s.proc.name)
		}
	}
}

// saveLogs writes each relay process's stderr to dir/<name>.log.
func (c *cluster) saveLogs(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Errorf("save relay logs: %v", err)
		return
	}
	for _, p := range c.all {
		if err := os.WriteFile(filepath.Join(dir, p.name+".log"), []byte(p.stderr.String()), 0o644); err != nil {
			c.t.Errorf("save relay logs: %v", err)
		}
	}
	c.t.Logf("relay logs in %s", dir)
}

// holdingSQL counts the outbox rows relay process $1 holds claimed: with
// lease claims, rows processing under one of its tokens; with lock claims,
// rows its open claim transactions have locked (their xmax is the
// transaction's id).
const holdingSQL = `SELECT count(*)
FROM public.outbox
WHERE status IN ('pending', 'processing')
  AND (status = 'processing' AND locked_by LIKE $1 || '#%'
       OR xmax::text IN (
           SELECT backend_xid::text
           FROM pg_stat_activity
           WHERE application_name = $1
             AND backend_xid IS NOT NULL
             AND state LIKE 'idle in transaction%'))`

// holding counts the outbox rows a relay process holds claimed.
func (c *cluster) holding(ctx context.Context, name string) int {
	var n int
	err := c.pool.QueryRow(ctx, holdingSQL, name).Scan(&n)
	if err != nil {
		return 0 // the server may be restarting: the caller retries
	}
	return n
}

// activeStatements counts the relay process's statements still running
// on the server (by its application_name).
func (c *cluster) activeStatements(ctx context.Context, name string) int {
	var n int
	err := c.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'", name).Scan(&n)
	if err != nil {
		return -1
	}
	return n
}

// statuses counts the outbox rows by status.
func (c *cluster) statuses(ctx context.Context) (map[string]int, error) {
	rows, err := c.pool.Query(ctx, "SELECT status, count(*) FROM public.outbox GROUP BY 1")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}
