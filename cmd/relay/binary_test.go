package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

// The relay binary holds what operators run: the benchmark harness is the
// command relay-bench, and relay links none of the bench's packages.
func TestBinaryLinksNoBenchmark(t *testing.T) {
	t.Parallel()
	const module = "github.com/outboxrelay/outboxrelay/"
	out, err := exec.Command("go", "list", "-deps", module+"cmd/relay").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/relay: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !strings.Contains(string(out), module+"relay\n") {
		t.Fatalf("go list -deps ./cmd/relay listed no relay package:\n%s", out)
	}
	for _, pkg := range deps {
		if pkg == module+"internal/bench" || strings.HasPrefix(pkg, module+"internal/bench/") || pkg == module+"cmd/relay-bench" {
			t.Errorf("cmd/relay links %s, a package of the benchmark (cmd/relay-bench)", pkg)
		}
	}
}

// relay bench says where the benchmark is.
func TestBenchIsRelayBench(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := invoke(context.Background(), nil, "bench", "burn-down")
	if code != 2 || !strings.Contains(stderr, `unknown command "bench"`) || !strings.Contains(stderr, "go run ./cmd/relay-bench") {
		t.Fatalf("relay bench: exit %d, want 2 naming relay-bench; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	_, usage, _ := invoke(context.Background(), nil, "--help")
	if strings.Contains(usage, "bench") {
		t.Errorf("relay --help lists a bench command:\n%s", usage)
	}
}
