// Command relay runs the outbox relay, migrates the outbox table and runs a
// self-contained demo.
//
//	relay run              claim and publish outbox rows until SIGTERM/SIGINT
//	relay migrate up       apply pending migrations (safe to run from many replicas)
//	relay migrate down     revert the latest migration
//	relay migrate status   list migrations and when they ran
//	relay demo             end-to-end demo on local PostgreSQL and an embedded broker
//	relay healthcheck      ask a running relay's /readyz or /healthz; exit 0 on 200
//	relay status           the table's rows by state and topic, relays, shards, retention
//	relay failed           list, show, group, retry or purge failed rows
//	relay replay           put sent rows back to pending, to publish them again
//	relay console          serve the admin commands as an HTTP JSON API
//	relay version          print the version
//
// Every flag can also be set from the environment: --database-url is
// OUTBOX_DATABASE_URL. A mysql:// or mariadb:// URL selects MySQL 8 or
// MariaDB 10.6+, where every command works (docs/mysql.md). Exit status:
// 0 success, 1 failure, 2 bad usage or configuration. The benchmark
// harness is a command of its own, cmd/relay-bench.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
)

const usage = `relay: transactional outbox relay for PostgreSQL, MySQL 8 and MariaDB 10.6+

Usage:
  relay run [flags]              claim and publish outbox rows until SIGTERM/SIGINT
  relay migrate up|down|status   manage the outbox table's schema
  relay demo [flags]             end-to-end demo: local PostgreSQL (or --database-url mysql://...), an embedded Kafka-protocol broker or --sink nats|rabbitmq|redis|webhook
  relay healthcheck [flags]      ask a running relay's /readyz (or --path /healthz); exit 0 on HTTP 200
  relay status [flags]           rows by state and topic, oldest due age, relays, shard leases, retention
  relay failed list|show|groups|retry|purge [flags] [ID...]
                                 inspect failed rows, put them back to pending, or delete them
  relay replay [flags] [ID...]   put sent rows back to pending, to publish them again
  relay console [flags]          serve status, failed rows and groups as an HTTP JSON API
  relay version                  print the version

Run "relay <command> --help" for the flags of a command. Every flag can also
be set by an environment variable: --database-url is OUTBOX_DATABASE_URL.
A mysql:// or mariadb:// --database-url selects MySQL or MariaDB
(docs/mysql.md#command-line).`

// defaultGOGC is the garbage collector's target of the commands that run
// relays when the environment sets no GOGC. The relay allocates for every
// row it claims and publishes; at Go's default of 100 collecting takes
// CPU that a drain on a small host takes from the database. 400 trades
// some memory for it (docs/operations.md#kubernetes-deploykubernetes).
const defaultGOGC = 400

// tuneGC sets the garbage collector's target to defaultGOGC for the
// commands that run relays (run, demo), unless GOGC is set.
func tuneGC(cmd string, getenv func(string) string) {
	if (cmd == "run" || cmd == "demo") && getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGOGC)
	}
}

func main() {
	if len(os.Args) > 1 {
		tuneGC(os.Args[1], os.Getenv)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills the process at once
	}()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run executes one command and returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		err = runRelay(ctx, rest, getenv, stdout, stderr)
	case "migrate":
		err = runMigrate(ctx, rest, getenv, stdout, stderr)
	case "demo":
		err = runDemo(ctx, rest, getenv, stdout, stderr)
	case "status":
		err = runStatus(ctx, rest, getenv, stdout, stderr)
	case "failed":
		err = runFailed(ctx, rest, getenv, stdinConsole(), stdout, stderr)
	case "replay":
		err = runReplay(ctx, rest, getenv, stdinConsole(), stdout, stderr)
	case "console":
		err = runConsole(ctx, rest, getenv, stdout, stderr)
	case "healthcheck":
		err = runHealthcheck(ctx, rest, getenv, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprint(stdout, buildVersion())
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprintln(stdout, usage)
		return 0
	case "bench":
		fmt.Fprintln(stderr, `relay: unknown command "bench": the benchmark harness is the command relay-bench, run from a clone of the repository: go run ./cmd/relay-bench --help`)
		return 2
	default:
		fmt.Fprintf(stderr, "relay: unknown command %q\n\n%s\n", cmd, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(*errUsage)):
		// One line per problem: all of them at once.
		for _, msg := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(stderr, "relay:", msg)
		}
		return 2
	default:
		fmt.Fprintln(stderr, "relay:", err)
		return 1
	}
}
