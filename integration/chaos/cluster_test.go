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

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
)

// cluster is everything the run breaks: a private database server
// (PostgreSQL, or MariaDB with OUTBOX_CHAOS_DB=mariadb), a broker behind a
// fault proxy, and relay processes each behind its own database fault
// proxy.
type cluster struct {
	t   *testing.T
	bin string

	db database
	// ordered is the relays' ordered topic, "" when the database has none.
	ordered string

	// sink is the broker the relays publish to; brokerProxy the fault
	// proxy in front of it.
	sink        *sink
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

// slot is one relay position: its database proxy outlives the processes
// that come and go in it. (pgProxy keeps its name from the PostgreSQL
// harness; on MariaDB it is in front of mariadbd.)
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

// startCluster starts the database, the sink's broker and its proxy,
// migrates the outbox table and starts p.relays relays. ordered is the
// relays' ordered topic, "" for none.
func startCluster(ctx context.Context, t *testing.T, bin string, p profile, db database, sk *sink, ordered string) *cluster {
	c := &cluster{t: t, bin: bin, db: db, ordered: ordered, sink: sk}
	db.start(ctx, t)

	c.brokerProxy = sk.start(ctx, t)

	db.migrate(ctx, t, bin, ordered != "")
	for i := range p.relays {
		pr, err := faultproxy.Start(db.upstream())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pr.Close() })
		c.slots = append(c.slots, &slot{index: i, pgProxy: pr})
	}
	t.Cleanup(c.killAll)
	for _, s := range c.slots {
		c.startRelay(ctx, s)
	}
	return c
}

// startRelay starts a new relay process in s, connected to the database
// through the slot's proxy and to the sink's broker through its proxy.
func (c *cluster) startRelay(ctx context.Context, s *slot) {
	s.gen++
	name := fmt.Sprintf("r%d.%d", s.index, s.gen)
	dbArgs, dbEnv, err := c.db.relayArgs(ctx, s.index, name, s.pgProxy.Addr(), c.ordered)
	if err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	sinkArgs, sinkEnv := c.sink.relayArgs()
	args := []string{"run",
		"--relay-id", name,
		"--batch-size", "50", "--poll-interval", "50ms",
		"--lease", lease.String(), "--publish-timeout", publishTimeout.String(),
		"--backoff-min", "100ms", "--backoff-max", "2s", "--max-attempts", "25",
		"--outage-backoff-min", "50ms", "--outage-backoff-max", "1s",
		"--shutdown-timeout", shutdownTimeout.String(),
		// Odd slots run two batches in flight, so both loops meet the faults.
		"--workers", fmt.Sprint(1 + s.index%2)}
	args = append(append(args, dbArgs...), sinkArgs...)
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(append(os.Environ(), dbEnv...), sinkEnv...)
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

// holding counts the outbox rows a relay process holds claimed.
func (c *cluster) holding(ctx context.Context, name string) int {
	return c.db.holding(ctx, name)
}

// activeStatements counts the relay process's statements still running
// on the server.
func (c *cluster) activeStatements(ctx context.Context, name string) int {
	return c.db.activeStatements(ctx, name)
}

// statuses counts the outbox rows by status.
func (c *cluster) statuses(ctx context.Context) (map[string]int, error) {
	return c.db.statuses(ctx)
}
