package main

import (
	"context"
	"strings"
	"testing"
)

// stderrLines splits stderr into its lines.
func stderrLines(stderr string) []string {
	return strings.Split(strings.TrimRight(stderr, "\n"), "\n")
}

// relay run with several bad settings reports every one of them at once,
// each on a "relay: " line of its own naming the flag and its variable,
// exits 2, and prints nothing else: no log line (such as the sink's
// configuration) comes before the list.
func TestRunReportsEveryConfigurationErrorAtOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want []string // the lines of stderr, in order (each may go on)
	}{
		{"stdout sink", map[string]string{"OUTBOX_LEASE": "abc", "OUTBOX_HEAD_OF_LINE": "sideways"},
			[]string{"run", "--sink", "stdout", "--batch-size", "0", "--workers", "100", "--log-format", "xml", "--backoff-max", "100000h"},
			[]string{
				`relay: invalid value for --lease from OUTBOX_LEASE: "abc" is not ` + expectDuration,
				"relay: --database-url (OUTBOX_DATABASE_URL) is required",
				"relay: invalid value for --batch-size (OUTBOX_BATCH_SIZE): must be positive",
				"relay: invalid value for --workers (OUTBOX_WORKERS): 100 is not between 1 and 64",
				"relay: invalid value for --backoff-max (OUTBOX_BACKOFF_MAX): 100000h0m0s is longer than 24h0m0s",
				`relay: invalid value for --head-of-line (OUTBOX_HEAD_OF_LINE): "sideways" is neither "wait" nor "park"`,
				`relay: invalid value for --log-format (OUTBOX_LOG_FORMAT): "xml"; use text or json`,
			}},
		{"kafka sink", map[string]string{"OUTBOX_KAFKA_SASL_MECHANISM": "gssapi", "OUTBOX_DATABASE_URL": "postgres://app:hunter2@[::1"},
			[]string{"run", "--kafka-brokers", "k1:9092,k2:99999", "--kafka-partitioner", "sticky", "--shards", "2000", "--ordered-topics", "*", "--pprof-addr", "6060"},
			[]string{
				"relay: invalid value for --database-url (OUTBOX_DATABASE_URL): cannot parse `postgres://app:xxxxx@[::1`",
				"relay: invalid value for --shards (OUTBOX_SHARDS): 2000 is not between 1 and 1024",
				`relay: invalid value for --kafka-brokers (OUTBOX_KAFKA_BROKERS): entry 1 ("k2:99999") has no valid port: use 1-65535`,
				`relay: invalid value for --kafka-partitioner (OUTBOX_KAFKA_PARTITIONER): "sticky" is not one of murmur2, crc32, fnv1a, round-robin`,
				`relay: invalid value for --kafka-sasl-mechanism (OUTBOX_KAFKA_SASL_MECHANISM): "gssapi" is not one of plain, scram-sha-256, scram-sha-512`,
				`relay: invalid value for --pprof-addr (OUTBOX_PPROF_ADDR): "6060" is not host:port, e.g. 127.0.0.1:6060`,
			}},
		// The sink's configuration used to be logged before the missing
		// database URL was noticed.
		{"valid sink, no database", nil,
			[]string{"run", "--kafka-brokers", "127.0.0.1:9092"},
			[]string{"relay: --database-url (OUTBOX_DATABASE_URL) is required"}},
		{"kafka sink without brokers", nil,
			[]string{"run", "--database-url", "postgres://127.0.0.1:1/db", "--kafka-partitioner", "sticky"},
			[]string{
				"relay: --kafka-brokers (OUTBOX_KAFKA_BROKERS) is required with --sink kafka",
				`relay: invalid value for --kafka-partitioner (OUTBOX_KAFKA_PARTITIONER): "sticky" is not one of`,
			}},
		// What follows an unknown flag is not read: its settings are not
		// judged (the database URL is not "missing").
		{"unknown flag stops reading", nil,
			[]string{"run", "--lease", "abc", "--frobnicate", "--database-url", "postgres://127.0.0.1:1/db", "--sink", "stdout"},
			[]string{
				`relay: invalid value for --lease (OUTBOX_LEASE): "abc" is not ` + expectDuration,
				`relay: unknown flag --frobnicate; run "relay run --help" for the flags`,
			}},
		{"bad values on the command line", nil,
			[]string{"run", "--sink", "stdout", "--lease", "soon", "--max-attempts", "ten", "--keep-sent=maybe", "--database-url", "postgres://127.0.0.1:1/db"},
			[]string{
				`relay: invalid value for --lease (OUTBOX_LEASE): "soon" is not ` + expectDuration,
				`relay: invalid value for --max-attempts (OUTBOX_MAX_ATTEMPTS): "ten" is not ` + expectInt,
				`relay: invalid value for --keep-sent (OUTBOX_KEEP_SENT): "maybe" is not ` + expectBool,
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := invoke(context.Background(), c.env, c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			got := stderrLines(stderr)
			same := len(got) == len(c.want)
			for i := 0; same && i < len(got); i++ {
				same = strings.HasPrefix(got[i], c.want[i])
			}
			if !same {
				t.Errorf("stderr:\n%s\nwant these lines and nothing else:\n%s", stderr, strings.Join(c.want, "\n"))
			}
			if stdout != "" {
				t.Errorf("stdout is not empty:\n%s", stdout)
			}
			if strings.Contains(stderr, "hunter2") {
				t.Errorf("stderr leaks the password:\n%s", stderr)
			}
		})
	}
}

// A value that does not parse names its flag, its variable (or that it
// came from it), the value and the format expected, for every kind of
// flag, from the command line and from the environment.
func TestBadValuesSayWhatWasExpected(t *testing.T) {
	t.Parallel()
	base := []string{"run", "--sink", "stdout", "--database-url", "postgres://127.0.0.1:1/db"}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"duration from the environment", map[string]string{"OUTBOX_LEASE": "abc"}, nil,
			`invalid value for --lease from OUTBOX_LEASE: "abc" is not a duration such as 30s, 500ms or 1m30s (units ns, us, ms, s, m, h)`},
		{"duration without a unit", nil, []string{"--poll-interval", "500"},
			`invalid value for --poll-interval (OUTBOX_POLL_INTERVAL): "500" is not a duration such as 30s, 500ms or 1m30s`},
		{"integer from the environment", map[string]string{"OUTBOX_BATCH_SIZE": "1e3"}, nil,
			`invalid value for --batch-size from OUTBOX_BATCH_SIZE: "1e3" is not a whole number such as 100`},
		{"integer out of range", nil, []string{"--janitor-batch=99999999999999999999"},
			`invalid value for --janitor-batch (OUTBOX_JANITOR_BATCH): "99999999999999999999" is out of range`},
		{"boolean from the environment", map[string]string{"OUTBOX_LISTEN": "sometimes"}, nil,
			`invalid value for --listen from OUTBOX_LISTEN: "sometimes" is not true or false`},
		{"unknown flag", nil, []string{"--frobnicate"},
			`unknown flag --frobnicate; run "relay run --help" for the flags`},
		{"missing value", nil, []string{"--lease"},
			`missing value for --lease; run "relay run --help" for the flags`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := invoke(context.Background(), c.env, append(base, c.args...)...)
			if code != 2 || !strings.Contains(stderr, "relay: "+c.want) {
				t.Fatalf("exit %d, want 2 saying %q; stderr:\n%s", code, c.want, stderr)
			}
			if strings.Contains(stderr, "parse error") || strings.Contains(stderr, " -"+strings.TrimPrefix(strings.Fields(c.want)[3], "--")) {
				t.Errorf("stderr says \"parse error\" or names the flag with one dash:\n%s", stderr)
			}
		})
	}
}
