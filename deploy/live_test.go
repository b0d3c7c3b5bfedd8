package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// liveRelay is a relay run process started by a test.
type liveRelay struct {
	cmd  *exec.Cmd
	addr string // the bound metrics listener, host:port
	logs *lockedBuffer
	done chan error
}

// lockedBuffer collects a process's output for the test's messages.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// testOverrides turns a kit's relay environment into one for this
// machine: the test database and schema, the stdout sink instead of the
// kit's broker (its variables dropped), and a free port for the metrics
// listener. Everything else (timeouts, ordered topics, log format, ...) is
// the kit's.
func testOverrides(env map[string]string, dbURL string, table outbox.Table) []string {
	out := []string{"PATH=" + os.Getenv("PATH")}
	for _, k := range sortedKeys(env) {
		if strings.HasPrefix(k, "OUTBOX_KAFKA_") || k == "OUTBOX_METRICS_ADDR" {
			continue
		}
		out = append(out, k+"="+env[k])
	}
	return append(out,
		"OUTBOX_DATABASE_URL="+dbURL,
		"OUTBOX_SCHEMA="+table.Schema,
		"OUTBOX_TABLE="+table.Name,
		"OUTBOX_SINK=stdout",
		"OUTBOX_LOG_FORMAT=json",
	)
}

// replaceFlag returns args with flag name's value set to value.
func replaceFlag(args []string, name, value string) []string {
	out := make([]string, 0, len(args)+2)
	found := false
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--"+name && i+1 < len(args):
			out = append(out, a, value)
			i++
			found = true
		case strings.HasPrefix(a, "--"+name+"="):
			out = append(out, "--"+name+"="+value)
			found = true
		default:
			out = append(out, a)
		}
	}
	if !found {
		out = append(out, "--"+name, value)
	}
	return out
}

// startRelay runs `relay run args...` with env and waits for it to log
// the address of its metrics listener.
func startRelay(t *testing.T, args, env []string) *liveRelay {
	t.Helper()
	cmd := exec.Command(relayBinary(t), args...)
	cmd.Env = env
	logs := &lockedBuffer{}
	cmd.Stdout = io.Discard // the stdout sink's events
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lr := &liveRelay{cmd: cmd, logs: logs, done: make(chan error, 1)}
	addrc := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			line := s.Text()
			fmt.Fprintln(logs, line)
			var rec struct {
				Msg     string `json:"msg"`
				Address string `json:"address"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Address != "" && strings.Contains(rec.Msg, "metrics") {
				select {
				case addrc <- rec.Address:
				default:
				}
			}
		}
		lr.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-lr.done
		}
	})
	select {
	case lr.addr = <-addrc:
	case err := <-lr.done:
		lr.done <- err
		t.Fatalf("relay run exited before serving metrics: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("relay run logged no metrics address within 30s:\n%s", logs)
	}
	return lr
}

// get returns the status and body of a GET on the relay's listener.
func (lr *liveRelay) get(t *testing.T, path string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + lr.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// awaitOK GETs path until it answers 200, for up to within.
func (lr *liveRelay) awaitOK(t *testing.T, path string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, body := lr.get(t, path)
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s still answers %d after %v: %s\nrelay log:\n%s", path, code, within, body, lr.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop sends SIGTERM, as Kubernetes and Docker do, and returns how long
// the process took to exit 0.
func (lr *liveRelay) stop(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := lr.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lr.done:
		took := time.Since(start)
		if err != nil {
			t.Errorf("relay run exited with %v after SIGTERM\n%s", err, lr.logs)
		}
		return took
	case <-time.After(limit):
		t.Fatalf("relay run still running %v after SIGTERM\n%s", limit, lr.logs)
		return 0
	}
}

// writeEvents writes n events: keyed ones on each topic in turn.
func writeEvents(t *testing.T, pool *pgxpool.Pool, table outbox.Table, topics []string, n int) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: topics[i%len(topics)], Key: []byte(fmt.Sprintf("key-%d", i%7)), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	if _, err := w.WriteBatch(ctx, tx, msgs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// migrateLikeTheJob runs relay migrate up as the Kubernetes Job does
// (its args and variables), on the test's schema.
func migrateLikeTheJob(t *testing.T, dbURL string, table outbox.Table) {
	t.Helper()
	kit := loadK8s(t)
	c := kit.jobs[0].Spec.Template.Spec.Containers[0]
	env, _ := kit.containerEnv(t, c)
	cmd := exec.Command(relayBinary(t), c.Args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for _, k := range sortedKeys(env) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.Env = append(cmd.Env, "OUTBOX_DATABASE_URL="+dbURL, "OUTBOX_SCHEMA="+table.Schema, "OUTBOX_TABLE="+table.Name)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("relay %s: %v\n%s", strings.Join(c.Args, " "), err, out)
	}
}

// TestLiveRelayAsDeployed runs relay run as the Kubernetes Deployment and
// as the compose relays configure it (args and environment; the database,
// schema and sink swapped for this machine's, the listener on a free
// port) on a table migrated as the migration Job does, writes events, and
// checks that the probe paths the kit names answer 200 on the listener,
// that relay healthcheck as the image's HEALTHCHECK runs it exits 0, that
// /metrics exports every metric the Grafana dashboard queries, and that
// SIGTERM ends the process within the grace period the kit allows.
func TestLiveRelayAsDeployed(t *testing.T) {
	dbURL := testdb.URL(t)
	pool, table := testdb.NewEmpty(t)
	migrateLikeTheJob(t, dbURL, table)

	kit := loadK8s(t)
	dep, c := kit.relayDeployment(t)
	k8sEnv, _ := kit.containerEnv(t, c)
	compose := loadCompose(t)
	hc := dockerHealthcheck(t)
	dash := loadDashboard(t, "compose/grafana/dashboards/outbox-relay.json")
	bound := shutdownBound(t)

	type setup struct {
		name   string
		args   []string
		env    map[string]string
		paths  []string      // probe paths to ask
		grace  time.Duration // until SIGKILL
		scrape bool          // compare /metrics with the dashboard
	}
	setups := []setup{{
		name:  "kubernetes",
		args:  c.Args,
		env:   k8sEnv,
		paths: []string{c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path},
		grace: time.Duration(*dep.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second,
	}}
	for _, name := range sortedKeys(compose.relayServices(t)) {
		s := compose.Services[name]
		if s.Command[0] != "run" {
			continue
		}
		g, err := time.ParseDuration(s.StopGracePeriod)
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for k, v := range dockerfileEnv(t) {
			env[k] = v
		}
		for k, v := range s.Environment {
			env[k] = v
		}
		setups = append(setups, setup{name: "compose " + name, args: s.Command, env: env, paths: []string{hc.path}, grace: g, scrape: true})
		break // the compose relays differ only in their relay id
	}

	sent := 0
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			args := replaceFlag(s.args, "metrics-addr", "127.0.0.1:0")
			lr := startRelay(t, args, testOverrides(s.env, dbURL, table))
			for _, p := range s.paths {
				lr.awaitOK(t, p, 30*time.Second)
			}

			// relay healthcheck, as the image's HEALTHCHECK runs it, on
			// this relay's listener.
			hcArgs := replaceFlag(hc.argv[1:], "addr", lr.addr)
			if out, err := exec.Command(relayBinary(t), hcArgs...).CombinedOutput(); err != nil {
				t.Errorf("relay %s: %v\n%s", strings.Join(hcArgs, " "), err, out)
			}

			topics := []string{"deploy.audit"}
			if ordered := s.env["OUTBOX_ORDERED_TOPICS"]; ordered != "" && ordered != "*" {
				topics = append(topics, strings.Split(ordered, ",")...)
			}
			writeEvents(t, pool, table, topics, 200)
			sent += 200
			testdb.AwaitSent(t, pool, table, sent, 30*time.Second)

			if s.scrape {
				checkScrape(t, lr, dash)
			}
			for _, p := range s.paths {
				if code, body := lr.get(t, p); code != http.StatusOK {
					t.Errorf("GET %s after the events: %d %s", p, code, body)
				}
			}
			timeout := shutdownTimeout(t, s.args, s.env)
			took := lr.stop(t, s.grace)
			t.Logf("SIGTERM to exit: %v (shutdown timeout %v + bound %v, grace %v)", took.Round(time.Millisecond), timeout, bound, s.grace)
			if took > timeout+bound {
				t.Errorf("exit took %v, more than the documented %v + %v", took, timeout, bound)
			}
		})
	}
}

// checkScrape waits until /metrics has a sample of every outbox_* name the
// dashboard and the alerts query, and fails naming those still missing
// after a backlog read or two.
func checkScrape(t *testing.T, lr *liveRelay, dash dashboard) {
	t.Helper()
	queried := dash.queriedMetrics()
	for name, alerts := range alertMetrics(loadAlerts(t)) {
		queried[name] = append(queried[name], alerts...)
	}
	deadline := time.Now().Add(45 * time.Second)
	for {
		code, body := lr.get(t, "/metrics")
		if code != http.StatusOK {
			t.Fatalf("GET /metrics: %d", code)
		}
		s := parseScrape(body)
		missing := s.missing(queried)
		if len(missing) == 0 {
			names := 0
			for name := range s.types {
				if strings.HasPrefix(name, "outbox_") {
					names++
				}
			}
			t.Logf("/metrics has all %d names the dashboard and the alerts query (%d outbox_ families exported)", len(queried), names)
			return
		}
		if time.Now().After(deadline) {
			var lines []string
			for _, name := range missing {
				lines = append(lines, fmt.Sprintf("%s (panels %s)", name, strings.Join(queried[name], ", ")))
			}
			sort.Strings(lines)
			t.Fatalf("/metrics lacks what the dashboard or the alerts query:\n  %s\nfamilies exported: %s", strings.Join(lines, "\n  "), strings.Join(sortedKeys(s.types), " "))
		}
		time.Sleep(500 * time.Millisecond)
	}
}
