// Command relay-bench is the relay's benchmark harness (internal/bench), a
// developer tool run from a clone of the repository:
//
//	relay-bench burn-down   drain pre-written events; compare with the SQL and sink ceilings
//	relay-bench steady      write at a fixed rate; measure commit-to-arrival latency
//	relay-bench idle        run relays on an empty table; measure the database's load
//	relay-bench soak        write for long with retention on; see whether the table levels off
//	relay-bench broker      serve a sink's embedded broker (started by the modes)
//
// The relays it measures are processes of the relay binary: --relay-bin,
// or one built with `go build ./cmd/relay` from the module the working
// directory is in. It is a command of its own so that the relay binary
// holds only what operators run. Exit status: 0 success, 1 failure, 2 bad
// usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof" // --pprof-addr: the harness's profiles on the default mux
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/outboxrelay/outboxrelay/internal/bench"
)

const usage = `relay-bench: the relay's benchmark harness, a developer tool run from a clone of the repository

Usage: relay-bench burn-down|steady|idle|soak [flags]

Measures relay processes on a real PostgreSQL (or, burn-down only, MySQL 8 or MariaDB 10.6+ with
--database-url mysql://user:password@host:port/database) and a sink (--sink; Kafka by default):

  burn-down   pre-write --events events, time --relays relays draining them, and compare with
              the SQL-only ceiling of the same lifecycle measured in the same run, and with the
              sink's publisher publishing the same events alone
  steady      write --rate events/s for --duration, one per transaction, and measure each
              event's latency from its commit to its arrival at a consumer
  idle        run relays on an empty table for --duration and measure the database load
  soak        write like steady for a long --duration with the relays' retention janitor on
              (--retention, --janitor-interval), sample the table's size, dead tuples, the
              janitor's job row and the claim and end-to-end latency every --sample-every, and
              say whether they level off

The relays are processes of the relay binary given by --relay-bin; without it, relay-bench builds
one with "go build ./cmd/relay" from the module of the working directory (run it in the clone:
go run ./cmd/relay-bench burn-down --events 100000), into a temporary directory removed at the end.

Every run drops and recreates --schema. The sink's server is --sink-url (its --<sink>-url) or, for
Kafka, --kafka-brokers; by default the local one, or what the sink starts: an embedded Kafka broker,
in a process of its own ("relay-bench broker"); a webhook receiver, in this one. A table is printed,
or JSON with --json. Run "relay-bench <mode> --help" for the flags.`

// relayPackage is what relay-bench builds when --relay-bin is not given.
const relayPackage = "github.com/outboxrelay/outboxrelay/cmd/relay"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills the process at once
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a bad command line: relay-bench exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// run executes one command and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := command(ctx, args, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintln(stderr, "relay-bench:", err)
		return 2
	default:
		fmt.Fprintln(stderr, "relay-bench:", err)
		return 1
	}
}

func command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return usagef("a mode is needed: burn-down, steady, idle or soak")
	}
	mode, rest := args[0], args[1:]
	switch mode {
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return flag.ErrHelp
	case bench.BrokerCommand:
		return runBroker(ctx, rest, stdout)
	}
	m := bench.Mode(mode)
	if !slices.Contains(bench.Modes, m) {
		return usagef("unknown mode %q: use burn-down, steady, idle or soak", mode)
	}
	var bf benchFlags
	fs := bf.flagSet(m)
	if err := parse(fs, rest, usage, stdout); err != nil {
		return err
	}
	cfg, err := bf.config(m)
	if err != nil {
		return err
	}
	return runBench(ctx, cfg, bf, stdout, stderr)
}

// runBench finds or builds the relay binary, runs the benchmark and prints
// its report.
func runBench(ctx context.Context, cfg bench.Config, bf benchFlags, stdout, stderr io.Writer) error {
	var err error
	if cfg.BrokerBinary, err = os.Executable(); err != nil {
		return fmt.Errorf("find the relay-bench binary: %w", err)
	}
	cfg.RelayBinary = bf.relayBin
	if bf.relayBin == "" {
		dir, err := os.MkdirTemp("", "relay-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.RelayBinary = filepath.Join(dir, "relay")
	} else if _, err := os.Stat(bf.relayBin); err != nil {
		return usagef("invalid value for --relay-bin: %v", err)
	}
	if err := cfg.Validate(); err != nil { // before a build a bad flag would waste
		return flagError(err)
	}
	if bf.pprofAddr != "" {
		bound, err := servePprof(bf.pprofAddr)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "serving the harness's profiles on http://%s/debug/pprof/\n", bound)
	}
	if bf.relayBin == "" {
		if err := buildRelay(ctx, cfg.RelayBinary, stderr); err != nil {
			return err
		}
	}
	cfg.Progress = stderr
	rep, err := bench.Run(ctx, cfg)
	if rep != nil && len(rep.Runs)+len(rep.Ceiling) > 0 {
		if perr := printReport(stdout, rep, bf.jsonOut); perr != nil && err == nil {
			err = perr
		}
	}
	return flagError(err)
}

// buildRelay builds the relay binary at path, from the module the working
// directory is in.
func buildRelay(ctx context.Context, path string, progress io.Writer) error {
	fmt.Fprintln(progress, "building the relay: go build ./cmd/relay (--relay-bin PATH skips this)")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", path, relayPackage).CombinedOutput()
	if err != nil {
		return fmt.Errorf("build the relay (relay-bench builds it from the clone of the repository it runs in; run it there, or give --relay-bin PATH): %w\n%s", err, out)
	}
	return nil
}

func printReport(w io.Writer, rep *bench.Report, asJSON bool) error {
	if !asJSON {
		return rep.WriteTable(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// servePprof serves the harness's own Go profiles on addr, a loopback
// address (the profiles, and /debug/pprof/cmdline with the database URL,
// are served to whoever connects), until the process exits.
func servePprof(addr string) (net.Addr, error) {
	host, _, err := net.SplitHostPort(addr)
	if ip, perr := netip.ParseAddr(host); err != nil || host != "localhost" && (perr != nil || !ip.IsLoopback()) {
		return nil, usagef("invalid value for --pprof-addr: %q is not a loopback address: use 127.0.0.1:PORT, [::1]:PORT or localhost:PORT", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usagef("invalid value for --pprof-addr: %v", err)
	}
	go http.Serve(ln, nil) //nolint:errcheck // serves until the process exits
	return ln.Addr(), nil
}

const brokerUsage = `Usage: relay-bench broker [flags]

Serves the sink's embedded broker on a free loopback port until SIGTERM, and prints one line: the
sink's flags that point at it, as a JSON array. The modes start it; it is seldom run by hand.`

// runBroker is `relay-bench broker`: a sink's embedded broker, which the
// modes start in a process of its own so that its CPU is measured apart.
func runBroker(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	sink := fs.String("sink", "kafka", "the sink whose embedded broker to serve")
	if err := parse(fs, args, brokerUsage, stdout); err != nil {
		return err
	}
	return bench.ServeBroker(ctx, stdout, *sink)
}
