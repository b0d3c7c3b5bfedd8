package main

import (
	"net/http"
	"strings"
	"testing"
)

// --pprof-addr serves the runtime profiles until the relay stops.
func TestServePprof(t *testing.T) {
	t.Parallel()
	addr, stop, err := servePprof("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr.String() + "/debug/pprof/cmdline"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, want 200", url, resp.Status)
	}
	stop()
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("GET %s after stop: %s, want a refused connection", url, resp.Status)
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
