package scripts_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tools are the programs check-prereqs.sh runs, besides what it checks.
var tools = []string{"bash", "tr", "ls", "sort", "sed", "id", "env"}

// fakePath returns a directory for PATH holding links to tools and to the
// named real programs, and executable stubs for the stub names.
func fakePath(t *testing.T, real, stubs []string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range append(append([]string{}, tools...), real...) {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := os.Symlink(p, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range stubs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runCheck runs check-prereqs.sh with only env as its environment.
func runCheck(t *testing.T, env ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./check-prereqs.sh")
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("check-prereqs.sh: %v\n%s", err, errOut.String())
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// testURL is the database make test uses.
func testURL() string {
	if u := os.Getenv("OUTBOX_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres"
}

// On a machine with nothing make test needs, the check exits 1 and names
// each missing piece with the command that installs or starts it: kcat,
// PostgreSQL's server programs, and a database that does not answer
// (without printing its password).
func TestCheckPrereqsNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	path := fakePath(t, []string{"go", "psql"}, nil)
	code, stdout, stderr := runCheck(t, "PATH="+path, "HOME="+t.TempDir(),
		"PG_SERVER_DIRS="+filepath.Join(t.TempDir(), "none"),
		"OUTBOX_TEST_DATABASE_URL=postgres://app:hunter2@127.0.0.1:1/postgres",
		"OUTBOX_TEST_NATS_URL=nats://127.0.0.1:1", "OUTBOX_TEST_RABBITMQ_URL=amqp://guest:secret@127.0.0.1:1/",
		"OUTBOX_TEST_REDIS_ADDR=127.0.0.1:1")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"make test needs what is missing below",
		"kcat: not on PATH", "sudo apt-get install -y kcat",
		"chromium: not on PATH", "sudo apt-get install -y chromium",
		"initdb, postgres: PostgreSQL's server programs are not installed", "sudo apt-get install -y postgresql",
		"the test database does not answer: postgres://app:xxxxx@127.0.0.1:1/postgres: ", "pg_ctlcluster",
		"make test OUTBOX_TEST_DATABASE_URL=",
		"NATS with JetStream does not answer on 127.0.0.1:1", "RabbitMQ does not answer on 127.0.0.1:1",
		"Redis does not answer on 127.0.0.1:1", "redis-server --daemonize yes",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr+stdout, "hunter2") {
		t.Errorf("the check prints the password:\n%s", stderr)
	}

	// Go missing too, and no psql to check the database with.
	path = fakePath(t, nil, nil)
	code, _, stderr = runCheck(t, "PATH="+path, "PG_SERVER_DIRS=/nonexistent", "OUTBOX_TEST_DATABASE_URL=postgres://x@127.0.0.1:1/x")
	if code != 1 || !strings.Contains(stderr, "go: not on PATH") || !strings.Contains(stderr, "kcat: not on PATH") {
		t.Errorf("exit %d, want 1 naming go and kcat:\n%s", code, stderr)
	}
}

// With everything there (kcat and the server programs as stubs, the test
// database for real), the check says so in one line and exits 0.
func TestCheckPrereqsPassesWhenAllIsThere(t *testing.T) {
	t.Parallel()
	server := t.TempDir()
	for _, name := range []string{"initdb", "postgres"} {
		if err := os.WriteFile(filepath.Join(server, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := fakePath(t, []string{"go", "psql"}, []string{"kcat", "chromium", "mosquitto", "node", "npm"})
	code, stdout, stderr := runCheck(t, "PATH="+path, "HOME="+t.TempDir(), "PG_SERVER_DIRS="+server,
		"OUTBOX_TEST_DATABASE_URL="+testURL())
	if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "prerequisites: ") || !strings.Contains(stdout, server) {
		t.Fatalf("exit %d, want 0 and one line naming %s; stdout:\n%s\nstderr:\n%s", code, server, stdout, stderr)
	}
}

// make test runs the check before anything else, and so do the targets
// that need what it checks.
func TestMakeTestChecksPrerequisitesFirst(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"test", "unit", "chaos-short"} {
		cmd := exec.Command("make", "-n", "--no-print-directory", target)
		cmd.Dir = ".."
		// Under make test, the outer make's settings would reach this one.
		cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=", "MFLAGS=")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("make -n %s: %v", target, err)
		}
		if first, _, _ := strings.Cut(string(out), "\n"); first != "scripts/check-prereqs.sh" {
			t.Errorf("make %s starts with %q, want scripts/check-prereqs.sh", target, first)
		}
	}
}
