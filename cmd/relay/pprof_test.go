package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
)

// --pprof-addr serves the runtime profiles until the relay stops, but not
// the command line, which holds the secrets given as flags.
func TestServePprof(t *testing.T) {
	t.Parallel()
	addr, stop, err := servePprof("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr.String() + "/debug/pprof/"
	for path, want := range map[string]int{"": http.StatusOK, "goroutine?debug=1": http.StatusOK, "cmdline": http.StatusNotFound} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %s, want %d", base+path, resp.Status, want)
		}
	}
	stop()
	if resp, err := http.Get(base); err == nil {
		resp.Body.Close()
		t.Fatalf("GET %s after stop: %s, want a refused connection", base, resp.Status)
	}
}

func TestPprofAddrInvalid(t *testing.T) {
	t.Parallel()
	code, _, stderr := invoke(t.Context(), map[string]string{"OUTBOX_DATABASE_URL": "postgres://127.0.0.1:1/db"},
		"run", "--sink", "stdout", "--pprof-addr", "256.0.0.1:x")
	if code != 2 || !strings.Contains(stderr, "--pprof-addr (OUTBOX_PPROF_ADDR)") {
		t.Fatalf("exit %d, want 2 naming --pprof-addr; stderr:\n%s", code, stderr)
	}
}

// A --pprof-addr that is not loopback is refused, naming the flag that
// allows it; with --pprof-allow-remote it is
// served, with a warning.
func TestPprofAddrNotLoopback(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTBOX_DATABASE_URL": "postgres://127.0.0.1:1/db"}
	for addr, loopback := range map[string]bool{
		":6060": false, "0.0.0.0:6060": false, "[::]:6060": false, "10.1.2.3:6060": false, "pprof.example.com:6060": false,
		"127.0.0.1:6060": true, "127.0.0.2:6060": true, "[::1]:6060": true, "localhost:6060": true,
	} {
		if got := isLoopbackAddr(addr); got != loopback {
			t.Errorf("isLoopbackAddr(%q) = %v, want %v", addr, got, loopback)
		}
	}
	// Refused at once: a relay that started would run until the timeout.
	refuseCtx, stop := context.WithTimeout(t.Context(), 10*time.Second)
	defer stop()
	code, _, stderr := invoke(refuseCtx, env, "run", "--sink", "stdout", "--pprof-addr", ":0")
	if code != 2 || !strings.Contains(stderr, `--pprof-addr (OUTBOX_PPROF_ADDR): ":0" is not a loopback address`) || !strings.Contains(stderr, "--pprof-allow-remote (OUTBOX_PPROF_ALLOW_REMOTE)") {
		t.Fatalf("exit %d, want 2 refusing :0 and naming --pprof-allow-remote; stderr:\n%s", code, stderr)
	}

	// Allowed: served (the database is unreachable: the relay waits for
	// it), and the log says so.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	env["OUTBOX_PPROF_ALLOW_REMOTE"] = "true"
	var out, errOut syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--sink", "stdout", "--pprof-addr", ":0"}, func(k string) string { return env[k] }, &out, &errOut)
	}()
	await(t, 10*time.Second, func() bool { return strings.Contains(errOut.String(), "profiles served beyond this host") })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after cancel, want 0; stderr:\n%s", code, errOut.String())
	}
}
