package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// The admin commands (relay status, relay failed, relay replay) share
// their flags and their wiring here; what they do is package admin's. They
// work on PostgreSQL and, on a mysql:// or mariadb:// URL, on MySQL and
// MariaDB (admin.NewMySQL).

// relaySessionName is the application_name of relay run's sessions, by
// which relay status finds the relays connected.
func relaySessionName(id string) string { return admin.DefaultSessionPrefix + id }

// adminSessionPrefix starts the application_name of the admin commands'
// sessions: they are not relays.
const adminSessionPrefix = "outboxrelay-admin "

// adminOptions are the flags every admin command shares.
type adminOptions struct {
	db                  dbFlags
	timeout             time.Duration
	logFormat, logLevel string
	json                bool
	actor               string
}

func (o *adminOptions) register(f *flags, getenv func(string) string) {
	o.db.register(f, "")
	f.Duration(&o.timeout, "timeout", time.Minute, "give up when the database does not answer, or the command has not finished, within this time")
	f.Bool(&o.json, "json", false, "print the result as JSON on standard output, for scripts")
	f.String(&o.actor, "actor", defaultActor(getenv), "who acts, for the audit trail and the log")
	f.String(&o.logFormat, "log-format", "text", "log format: text or json")
	f.String(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error; each change is logged at info")
}

// defaultActor is $USER@host, or what of it is known.
func defaultActor(getenv func(string) string) string {
	user := getenv("USER")
	if user == "" {
		user = getenv("LOGNAME")
	}
	host, _ := os.Hostname()
	switch {
	case user != "" && host != "":
		return user + "@" + host
	case user != "":
		return user
	}
	return host
}

// check reports the problems of the shared flags.
func (o *adminOptions) check(errs *problems) {
	if o.db.url == "" {
		errs.add(usageError("--database-url (%s) is required", envName("database-url")))
	} else {
		errs.add(o.db.check())
	}
	_, err := o.db.outboxTable()
	errs.add(err)
	_, err = newLogger(io.Discard, o.logFormat, o.logLevel)
	errs.add(err)
	if o.timeout <= 0 {
		errs.add(usageError("invalid value for --timeout (%s): must be positive", envName("timeout")))
	}
	if strings.TrimSpace(o.actor) == "" {
		errs.add(usageError("--actor (%s) is empty and neither USER nor the host name gives one; say who acts", envName("actor")))
	}
}

// open connects and returns an Admin for the table, and the function that
// closes the pool. ctx bounds the connection attempts.
func (o *adminOptions) open(ctx context.Context, stderr io.Writer) (*admin.Admin, func(), error) {
	logger, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		return nil, nil, err
	}
	table, err := o.db.outboxTable()
	if err != nil {
		return nil, nil, err
	}
	o.db.appName = adminSessionPrefix + o.actor
	if o.db.isMySQL() {
		return o.openMySQL(ctx, table, logger, stderr)
	}
	pool, err := o.db.pool(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := awaitDatabase(ctx, pool.Ping, o.db.url, stderr); err != nil {
		pool.Close()
		return nil, nil, err
	}
	adm, err := admin.New(pool, admin.Config{Table: table, Actor: o.actor, Logger: logger})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return adm, pool.Close, nil
}

// openMySQL is open on a mysql:// URL: a database/sql pool and
// admin.NewMySQL; the driver's own messages go to the log.
func (o *adminOptions) openMySQL(ctx context.Context, table outbox.Table, logger *slog.Logger, stderr io.Writer) (*admin.Admin, func(), error) {
	o.db.driverLog = slogDriverLogger{logger}
	db, err := o.db.mysqlDB()
	if err != nil {
		return nil, nil, err
	}
	closeDB := func() { _ = db.Close() }
	if err := awaitDatabase(ctx, db.PingContext, o.db.url, stderr); err != nil {
		closeDB()
		return nil, nil, err
	}
	adm, err := admin.NewMySQL(db, admin.Config{Table: table, Actor: o.actor, Logger: logger})
	if err != nil {
		closeDB()
		return nil, nil, err
	}
	return adm, closeDB, nil
}

var _ admin.DB = (*pgxpool.Pool)(nil)

// console is where a command asks for confirmation: standard input, and
// whether it is a terminal.
type console struct {
	in       io.Reader
	terminal bool
}

// stdinConsole is the process's standard input.
func stdinConsole() console {
	return console{in: os.Stdin, terminal: isTerminal(os.Stdin)}
}

// errAborted is a confirmation answered no.
var errAborted = errors.New("aborted; nothing changed")

// confirm asks question on the terminal (the prompt goes to prompt, so
// that standard output stays the result's). Without a terminal it
// refuses: a script must say --yes, on its command line.
func confirm(con console, prompt io.Writer, what, question string) error {
	if !con.terminal {
		return usageError("refusing to %s without confirmation: standard input is not a terminal; "+
			"add --yes to go ahead, or --dry-run to see what it would change", what)
	}
	fmt.Fprintf(prompt, "%s [y/N] ", question)
	line, err := bufio.NewReader(con.in).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(prompt)
		return errAborted
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errAborted
}

// parseWhen reads a time bound: an RFC 3339 time (2026-05-01T10:00:00Z),
// a date (2026-05-01, midnight UTC), or a duration (2h, 30m) meaning that
// long before now on the database clock. A duration is returned as ago,
// to be resolved once connected.
func parseWhen(s string) (at time.Time, ago time.Duration, err error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, 0, fmt.Errorf("%q is negative; a duration means that long ago", s)
		}
		return time.Time{}, d, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, 0, nil
		}
	}
	return time.Time{}, 0, fmt.Errorf("%q is neither a time such as 2026-05-01T10:00:00Z or 2026-05-01, nor a duration such as 2h meaning that long ago", s)
}

// whenFlag is a time-bound flag.
type whenFlag struct {
	raw string
	at  time.Time
	ago time.Duration
}

// register adds the flag; its errors are recorded when parsed.
func (w *whenFlag) register(f *flags, name, usage string) {
	f.add(name, "time", usage, func(s string) error {
		at, ago, err := parseWhen(s)
		if err != nil {
			return err
		}
		w.raw, w.at, w.ago = s, at, ago
		return nil
	}, func() string { return w.raw }, false)
}

// resolve returns the bound against the database clock now; zero when
// unset.
func (w *whenFlag) resolve(now time.Time) time.Time {
	switch {
	case w.raw == "":
		return time.Time{}
	case w.ago > 0 || w.at.IsZero():
		return now.Add(-w.ago)
	}
	return w.at
}

// timeRangeFlags are --<what>-after and --<what>-before.
type timeRangeFlags struct{ after, before whenFlag }

func (r *timeRangeFlags) register(f *flags, what, column string) {
	r.after.register(f, what+"-after", fmt.Sprintf("only rows whose %s is at or after this time: 2026-05-01T10:00:00Z, 2026-05-01, or a duration such as 2h meaning that long ago", column))
	r.before.register(f, what+"-before", fmt.Sprintf("only rows whose %s is before this time (same forms)", column))
}

func (r *timeRangeFlags) resolve(now time.Time) admin.TimeRange {
	return admin.TimeRange{From: r.after.resolve(now), To: r.before.resolve(now)}
}

func (r *timeRangeFlags) set() bool { return r.after.raw != "" || r.before.raw != "" }

// listFlag is a comma-separated flag that may be repeated.
func listFlag(f *flags, p *[]string, name, usage string) {
	f.add(name, "list", usage, func(s string) error {
		*p = append(*p, splitList(s)...)
		return nil
	}, func() string { return strings.Join(*p, ",") }, false)
}

// interleave moves the positional arguments after the flags, so that
// "relay failed retry ID --yes" reads like "relay failed retry --yes ID":
// the flag package stops at the first positional argument.
func interleave(f *flags, args []string) []string {
	var flagArgs, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i+1:]...)
			return append(append(flagArgs, "--"), positional...)
		case !strings.HasPrefix(a, "-") || a == "-":
			positional = append(positional, a)
		default:
			flagArgs = append(flagArgs, a)
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") {
				continue
			}
			if fl := f.fs.Lookup(name); fl != nil && !fl.Value.(*value).isBool && i+1 < len(args) {
				i++
				flagArgs = append(flagArgs, args[i])
			}
		}
	}
	if len(positional) == 0 {
		return flagArgs
	}
	return append(append(flagArgs, "--"), positional...)
}

// parseAdmin parses the command line of an admin command and reports every
// problem at once, with check's.
func parseAdmin(f *flags, o *adminOptions, args []string, check func(*problems)) error {
	var errs problems
	if err := f.parse(interleave(f, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) || f.stopped {
			return err
		}
		errs.add(err)
	}
	o.check(&errs)
	if check != nil {
		check(&errs)
	}
	return errs.err()
}

// secs formats seconds for a table: 850ms, 4.2s, 3m12s, 2h5m, 3d4h.
func secs(s float64) string {
	neg := s < 0
	if neg {
		s = -s
	}
	d := time.Duration(s * float64(time.Second))
	var out string
	switch {
	case d < time.Second:
		out = d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		out = d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		out = d.Round(time.Second).String()
	case d < 48*time.Hour:
		out = strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	default:
		days := int(d / (24 * time.Hour))
		out = fmt.Sprintf("%dd%dh", days, int((d-time.Duration(days)*24*time.Hour)/time.Hour))
	}
	if neg {
		return "-" + out
	}
	return out
}

// stamp formats a time for a table: UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// plural is "1 row", "2 rows".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
