package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Defaults of relay healthcheck: the port the deploy kit gives
// --metrics-addr, asked on the loopback interface, and the readiness check.
const (
	defaultHealthAddr    = "127.0.0.1:9090"
	defaultHealthPath    = "/readyz"
	defaultHealthTimeout = 2 * time.Second
)

// runHealthcheck asks a relay's --metrics-addr listener for a health
// check and returns nil on HTTP 200: a container image without curl or a
// shell can probe with the binary itself.
func runHealthcheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlags("relay healthcheck", "Usage: relay healthcheck [flags]\n\n"+
		"Asks a running relay's health endpoint (relay run --metrics-addr) and exits 0 on HTTP 200,\n"+
		"1 otherwise (another status, no answer within --timeout), printing the answer. For\n"+
		"container health checks: --path /healthz asks liveness, /readyz readiness.", stdout, getenv)
	var (
		addr, path string
		timeout    time.Duration
	)
	f.String(&addr, "addr", defaultHealthAddr, "host:port of the relay's --metrics-addr listener; an empty host means 127.0.0.1 (\":9090\" asks 127.0.0.1:9090)")
	f.String(&path, "path", defaultHealthPath, "the check to ask: /readyz (readiness) or /healthz (liveness)")
	f.Duration(&timeout, "timeout", defaultHealthTimeout, "how long to wait for the answer")
	var errs problems
	if err := f.parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) || f.stopped {
			return err
		}
		errs.add(err)
	}
	if len(f.args()) > 0 {
		errs.add(usageError("unexpected arguments %q", f.args()))
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		errs.add(usageError("invalid value for --addr (%s): %q is not host:port, e.g. 127.0.0.1:9090", envName("addr"), addr))
	}
	if !strings.HasPrefix(path, "/") {
		errs.add(usageError("invalid value for --path (%s): %q does not start with /", envName("path"), path))
	}
	if timeout <= 0 {
		errs.add(usageError("invalid value for --timeout (%s): must be positive", envName("timeout")))
	}
	if err := errs.err(); err != nil {
		return err
	}
	if host == "" {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port) + path

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	fmt.Fprintf(stdout, "%s: %s\n%s", url, resp.Status, body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck %s: %s", url, resp.Status)
	}
	return nil
}
