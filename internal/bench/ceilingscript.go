package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
)

// scriptLine is a result line of shared/bench/ceiling.sh:
// "ceiling <name> clients=<c> events_per_s=<n>".
var scriptLine = regexp.MustCompile(`(?m)^ceiling (\S+) clients=(\d+) events_per_s=(\d+)$`)

// runCeilingScript runs shared/bench/ceiling.sh with the run's database,
// rows and batch, for cross-checking the Go ceiling.
func runCeilingScript(ctx context.Context, cfg Config) ([]CeilingResult, error) {
	for _, tool := range []string{"bash", "psql", "pgbench"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("ceiling script: %s is not on PATH (Debian: /usr/lib/postgresql/<version>/bin): %w", tool, err)
		}
	}
	cmd := exec.CommandContext(ctx, "bash", cfg.CeilingScript, cfg.DatabaseURL, strconv.Itoa(cfg.CeilingRows), strconv.Itoa(cfg.BatchSize))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ceiling script %s: %w: %s", cfg.CeilingScript, err, stderr.String())
	}
	res := parseCeilingScript(out, cfg.CeilingRows, cfg.BatchSize)
	if len(res) == 0 {
		return nil, errors.New("ceiling script printed no result line: " + string(out))
	}
	return res, nil
}

// parseCeilingScript reads the script's result lines.
func parseCeilingScript(out []byte, rows, batch int) []CeilingResult {
	var res []CeilingResult
	for _, m := range scriptLine.FindAllSubmatch(out, -1) {
		clients, _ := strconv.Atoi(string(m[2]))
		rate, _ := strconv.ParseFloat(string(m[3]), 64)
		res = append(res, CeilingResult{Lifecycle: string(m[1]), Clients: clients, Rows: rows, Batch: batch, EventsPerSecond: rate})
	}
	return res
}
