package main

import (
	"context"
	"errors"
	"flag"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
)

// Secrets the fuzzed runs start from; neither may ever be printed.
const (
	fuzzDBPassword   = "db-Pa55word-fz"
	fuzzSASLPassword = "sasl-Pa55word-fz"
)

var (
	runFlagsOnce sync.Once
	runFlagNames []string
)

// runFlags returns the flags `relay run --help all` lists.
func runFlags(t *testing.T) []string {
	runFlagsOnce.Do(func() {
		_, stdout, _ := invoke(context.Background(), nil, "run", "--help", "all")
		for _, m := range regexp.MustCompile(`(?m)^\s+--([a-z0-9-]+)`).FindAllStringSubmatch(stdout, -1) {
			runFlagNames = append(runFlagNames, m[1])
		}
	})
	if len(runFlagNames) < 20 {
		t.Fatalf("relay run --help lists only %v", runFlagNames)
	}
	return runFlagNames
}

// usageNamesFlag matches the usage errors that name a flag and its
// environment variable.
var usageNamesFlag = regexp.MustCompile(`--([a-z0-9-]+) (?:\(|from )(OUTBOX_[A-Z0-9_]+)`)

// FuzzRunFlags runs `relay run` on fuzzed command lines and OUTBOX_*
// environments, through the binary's entry point with a cancelled context:
// the whole configuration path runs (flags, environment, relay.Config,
// kafka.Config, the pool) and nothing connects anywhere. The database URL
// is fixed (pgx dials eagerly for some URL settings) and the TLS file flags
// are left out (they read files). A run must never panic and must exit 0
// or 2; exit 2 prints a usage error that names the offending flag (and, for
// a bad value, its environment variable); neither password is ever printed.
func FuzzRunFlags(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""},
		{"--sink\nstdout", ""},
		{"--batch-size\n0", ""},
		{"--batch-size=100000", ""},
		{"", "OUTBOX_LEASE=soon"},
		{"", "OUTBOX_LEASE=10ms"},
		{"--lease\n1m", "OUTBOX_LEASE=soon"},
		{"", "OUTBOX_POLL_INTERVAL=-1s"},
		{"", "OUTBOX_BACKOFF_MIN=1m\nOUTBOX_BACKOFF_MAX=1s"},
		{"", "OUTBOX_BACKOFF_MAX=100000h"},
		{"", "OUTBOX_MAX_ATTEMPTS=0x10"},
		{"", "OUTBOX_SHUTDOWN_TIMEOUT=1e9"},
		{"--publish-timeout\n5", ""},
		{"--sink\ncarrier-pigeon", ""},
		{"", "OUTBOX_KAFKA_BROKERS=,"},
		{"", "OUTBOX_KAFKA_BROKERS=kafka"},
		{"", "OUTBOX_KAFKA_BROKERS=kafka:abc"},
		{"--kafka-partitioner\nsticky", ""},
		{"", "OUTBOX_KAFKA_SASL_MECHANISM=gssapi"},
		{"", "OUTBOX_KAFKA_SASL_USERNAME="},
		{"", "OUTBOX_KAFKA_SASL_MECHANISM=scram-sha-256\nOUTBOX_KAFKA_SASL_PASSWORD=bell\a"},
		{"--ordered-topics\n*\n--kafka-partitioner\nround-robin", ""},
		{"--ordered-topics\norders,bad topic", ""},
		{"--ordered-topics\norders\n--shards\n2000", ""},
		{"--head-of-line\nsideways", ""},
		{"--shard-budget\n-1", ""},
		{"--relay-id\nr\xffid", ""},
		{"", "OUTBOX_TABLE=outbox; DROP TABLE x\nOUTBOX_SCHEMA=a.b"},
		{"--log-level\nloud", ""},
		{"--log-format\nxml", ""},
		{"--frobnicate", ""},
		{"---x", ""},
		{"--batch-size", ""},
		{"extra", ""},
		{"-h", ""},
		{"--kafka-tls-insecure-skip-verify=maybe", ""},
		{"--janitor-vacuum=false\n--keep-sent", "OUTBOX_JANITOR_VACUUM=maybe"},
		{"", "OUTBOX_JANITOR_VACUUM=no"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, args, env string) {
		flags := runFlags(t)
		getenv := map[string]string{
			"OUTBOX_DATABASE_URL":         "postgres://app:" + fuzzDBPassword + "@127.0.0.1:1/db?connect_timeout=1",
			"OUTBOX_KAFKA_BROKERS":        "127.0.0.1:1",
			"OUTBOX_KAFKA_SASL_MECHANISM": "plain",
			"OUTBOX_KAFKA_SASL_USERNAME":  "relay",
			"OUTBOX_KAFKA_SASL_PASSWORD":  fuzzSASLPassword,
		}
		for _, kv := range strings.Split(env, "\n") {
			k, v, _ := strings.Cut(kv, "=")
			if k == "OUTBOX_DATABASE_URL" || strings.Contains(k, "TLS") {
				continue
			}
			getenv[k] = v
		}
		argv := []string{"run"}
		if args != "" {
			for _, a := range strings.Split(args, "\n") {
				if strings.Contains(a, "database-url") || strings.Contains(a, "tls") {
					continue
				}
				argv = append(argv, a)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var stdout, stderr syncbuf.Buffer
		code := run(ctx, argv, func(k string) string { return getenv[k] }, &stdout, &stderr)

		input := args + "\n" + env
		for _, secret := range []string{fuzzDBPassword, fuzzSASLPassword} {
			if !strings.Contains(input, secret) && strings.Contains(stdout.String()+stderr.String(), secret) {
				t.Fatalf("output holds the password %q; args %q, env %q:\n%s", secret, args, env, stderr.String())
			}
		}
		switch code {
		case 0:
			return
		case 2:
		default:
			t.Fatalf("exit %d, want 0 or 2; args %q, env %q:\n%s", code, args, env, stderr.String())
		}
		// Every problem is a "relay: " line of its own.
		var msgs []string
		for _, line := range strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n") {
			if msg, ok := strings.CutPrefix(line, "relay: "); ok {
				msgs = append(msgs, msg)
			}
		}
		if len(msgs) == 0 {
			t.Fatalf("exit 2 without a \"relay: \" message; args %q, env %q:\n%s", args, env, stderr.String())
		}
		for _, msg := range msgs {
			checkNamesFlag(t, flags, msg, args, env)
		}
	})
}

// checkNamesFlag fails the test unless the usage error msg names a flag of
// relay run (and its variable), or the argument the flag package could
// not take.
func checkNamesFlag(t *testing.T, flags []string, msg, args, env string) {
	t.Helper()
	if m := usageNamesFlag.FindStringSubmatch(msg); m != nil {
		if !slices.Contains(flags, m[1]) || m[2] != envName(m[1]) {
			t.Fatalf("usage error names --%s and %s, which is not a flag and its variable: %s", m[1], m[2], msg)
		}
		return
	}
	for _, generic := range []string{"unknown flag --", "bad flag syntax: ", "missing value for --", "unexpected arguments "} {
		if strings.Contains(msg, generic) {
			return // names the argument the flag package did not take
		}
	}
	if !slices.ContainsFunc(flags, func(name string) bool {
		return strings.Contains(msg, "--"+name+" ") || strings.Contains(msg, "--"+name+":")
	}) {
		t.Fatalf("usage error names no flag; args %q, env %q: %s", args, env, msg)
	}
}

// FuzzFlagsEnv checks the flag/environment precedence of flags.parse for
// each kind of flag: the command line wins, a non-empty variable is used
// otherwise, else the default; the value is what the flag package makes of
// the winning text; a bad value is a usage error naming the flag, and the
// variable when the value came from it.
func FuzzFlagsEnv(f *testing.F) {
	for _, s := range []struct {
		kind      uint8
		cli       string
		onCLI     bool
		env       string
		setEnvVar bool
	}{
		{0, "x", true, "y", true}, {0, "", false, "from-env", true}, {0, "", false, "", true},
		{1, "42", true, "7", true}, {1, "", false, "0x10", true}, {1, "", false, "ten", true}, {1, "1_000", true, "", false},
		{2, "true", true, "false", true}, {2, "", false, "maybe", true}, {2, "", false, "1", true},
		{3, "1m", true, "soon", true}, {3, "", false, "soon", true}, {3, "", false, "-5s", true}, {3, "5", true, "", false},
	} {
		f.Add(s.kind, s.cli, s.onCLI, s.env, s.setEnvVar)
	}
	f.Fuzz(func(t *testing.T, kind uint8, cli string, onCLI bool, env string, setEnvVar bool) {
		const name, variable = "some-flag", "OUTBOX_SOME_FLAG"
		var stderr syncbuf.Buffer
		fl := newFlags("fuzz", "fuzz", &stderr, func(k string) string {
			if k == variable && setEnvVar {
				return env
			}
			return ""
		})
		var (
			s   string
			n   int
			b   bool
			d   time.Duration
			get func() any
			ref *flag.FlagSet // a plain flag set to learn what a text means
		)
		ref = flag.NewFlagSet("ref", flag.ContinueOnError)
		var rs string
		var rn int
		var rb bool
		var rd time.Duration
		switch kind % 4 {
		case 0:
			fl.String(&s, name, "default", "usage")
			ref.StringVar(&rs, name, "default", "")
			get = func() any { return s }
		case 1:
			fl.Int(&n, name, 5, "usage")
			ref.IntVar(&rn, name, 5, "")
			get = func() any { return n }
		case 2:
			fl.Bool(&b, name, false, "usage")
			ref.BoolVar(&rb, name, false, "")
			get = func() any { return b }
		case 3:
			fl.Duration(&d, name, time.Second, "usage")
			ref.DurationVar(&rd, name, time.Second, "")
			get = func() any { return d }
		}
		refGet := map[uint8]func() any{0: func() any { return rs }, 1: func() any { return rn }, 2: func() any { return rb }, 3: func() any { return rd }}[kind%4]
		var args []string
		if onCLI {
			args = []string{"--" + name + "=" + cli}
		}
		err := fl.parse(args)

		winner, fromEnv := "", false
		switch {
		case onCLI:
			winner = cli
		case setEnvVar && env != "":
			winner, fromEnv = env, true
		}
		var refErr error
		if onCLI || fromEnv {
			refErr = ref.Set(name, winner)
		}
		if (err == nil) != (refErr == nil) {
			t.Fatalf("parse = %v, but the flag package says %v for %q", err, refErr, winner)
		}
		if err != nil {
			var usage *errUsage
			if !errors.As(err, &usage) {
				t.Fatalf("parse = %v (%T), want a usage error", err, err)
			}
			if !strings.Contains(err.Error(), name) || fromEnv && !strings.Contains(err.Error(), "--"+name+" from "+variable) {
				t.Fatalf("usage error %q does not name the flag (and %s)", err, variable)
			}
			return
		}
		if got, want := get(), refGet(); got != want {
			t.Fatalf("value %v, want %v (cli %q on=%t, env %q set=%t)", got, want, cli, onCLI, env, setEnvVar)
		}
	})
}

// kvQuote quotes a libpq key=value setting.
func kvQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// plainKV reports whether s can stand unquoted in a key=value string.
func plainKV(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\n\r\v\f'\\=")
}

// FuzzRedactDSN checks that what the relay logs of a database URL does not
// depend on the passwords in it (the user's password and sslpassword, the
// key file's), in URL and key=value form, quoted or not.
func FuzzRedactDSN(f *testing.F) {
	f.Add(uint8(0), "app", "hunter2", "db.example:5432", "orders", "sslmode=require")
	f.Add(uint8(1), "app", "p@ss/w0rd:x", "db", "orders", "")
	f.Add(uint8(2), "app", "s3cr3t", "db", "orders", "sslmode=verify-full&sslcert=c.pem&sslkey=k.pem")
	f.Add(uint8(3), "app", "key-pass", "db", "orders", "sslmode=verify-full")
	f.Add(uint8(4), "app", "quoted s3cr3t's", "db", "orders", "")
	f.Add(uint8(5), "app", "plain-s3cr3t", "db", "orders", "")
	f.Add(uint8(6), "", "", "[::1", "", "")
	f.Fuzz(func(t *testing.T, form uint8, user, password, host, db, query string) {
		// A '#' would start the fragment, which is no setting: pgx reads
		// no password from it.
		query = strings.ReplaceAll(query, "#", "")
		dsn := func(pw string) string {
			switch form % 7 {
			case 0: // postgres://user:pw@host/db
				u := url.URL{Scheme: "postgres", User: url.UserPassword(user, pw), Host: host, Path: "/" + db, RawQuery: query}
				return u.String()
			case 1:
				u := url.URL{Scheme: "postgresql", User: url.UserPassword(user, pw), Host: host, Path: "/" + db, RawQuery: query}
				return u.String()
			case 2: // ?password=
				u := url.URL{Scheme: "postgres", User: url.User(user), Host: host, Path: "/" + db,
					RawQuery: strings.TrimPrefix(query+"&password="+url.QueryEscape(pw), "&")}
				return u.String()
			case 3: // ?sslpassword=, the passphrase of the client key
				u := url.URL{Scheme: "postgres", User: url.User(user), Host: host, Path: "/" + db,
					RawQuery: strings.TrimPrefix(query+"&sslpassword="+url.QueryEscape(pw), "&")}
				return u.String()
			}
			// key=value: the other settings are plain words, as libpq
			// would read them.
			for _, v := range []*string{&user, &host, &db} {
				if !plainKV(*v) {
					*v = "x"
				}
			}
			value := kvQuote(pw)
			if form%7 == 5 && plainKV(pw) {
				value = pw
			}
			key := "password"
			if form%7 == 6 {
				key = "sslpassword"
			}
			return "host=" + host + " user=" + user + " " + key + "=" + value + " dbname=" + db
		}
		other := "other-" + password
		got, gotOther := redactDSN(dsn(password)), redactDSN(dsn(other))
		if got != gotOther {
			t.Fatalf("the redacted URL depends on the password:\n%s\n%s\n%q\n%q", dsn(password), dsn(other), got, gotOther)
		}
	})
}
