package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
)

// relay demo runs against every sink it can read back, its relays built
// by the registry from the sink's flags: a short run proves the promise.
// The brokers are those of this machine, or those the variables the
// sinks' own tests read name.
func TestDemoEverySink(t *testing.T) {
	t.Parallel()
	env := map[string]string{}
	for variable, test := range map[string]string{
		"OUTBOX_NATS_URL": "OUTBOX_TEST_NATS_URL", "OUTBOX_RABBITMQ_URL": "OUTBOX_TEST_RABBITMQ_URL",
	} {
		if v := os.Getenv(test); v != "" {
			env[variable] = v
		}
	}
	if addr := os.Getenv("OUTBOX_TEST_REDIS_ADDR"); addr != "" {
		env["OUTBOX_REDIS_URL"] = "redis://" + addr + "/0"
	}
	for _, name := range sinks.Readables() {
		for _, ordered := range []string{"false", "true"} {
			t.Run(name+"/ordered="+ordered, func(t *testing.T) {
				t.Parallel()
				_, table := testdb.NewEmpty(t) // a fresh schema name, dropped at the end
				code, stdout, stderr := invoke(context.Background(), env, "demo", "--sink", name, "--ordered="+ordered,
					"--database-url", testdb.URL(t), "--schema", table.Schema,
					"--events", "200", "--writers", "2", "--relays", "2", "--timeout", "1m")
				if code != 0 || !strings.Contains(stdout, "OK: every committed event arrived intact") {
					t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
				}
				if ordered == "true" && !strings.Contains(stdout, "per-key order violations   0") {
					t.Errorf("no order line:\n%s", stdout)
				}
			})
		}
	}
}

// Every sink relay run knows, but stdout, which the demo cannot read
// back, has a reader.
func TestDemoSinksCoverTheRegistry(t *testing.T) {
	t.Parallel()
	if got, want := len(sinks.Readables()), len(sinks.All())-1; got != want {
		t.Errorf("relay demo reads back %v, want every sink but stdout", sinks.Readables())
	}
}

// What relay demo cannot do is a usage error naming the flag, before it
// touches the database.
func TestDemoRefuses(t *testing.T) {
	t.Parallel()
	url := "postgres://postgres@127.0.0.1:1/postgres"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sink", "stdout"}, `invalid value for --sink (OUTBOX_SINK): "stdout"`},
		{[]string{"--sink", "webhook", "--webhook-url", "http://127.0.0.1:1/{topic}"}, "leave --webhook-url (OUTBOX_WEBHOOK_URL) unset"},
		{[]string{"--ordered", "--kafka-partitioner", "round-robin"}, "--kafka-partitioner round-robin"},
		{[]string{"--sink", "nats", "--nats-max-in-flight", "0"}, "--nats-max-in-flight (OUTBOX_NATS_MAX_IN_FLIGHT)"},
		{[]string{"--inbox", "--sink", "rabbitmq"}, "--inbox (OUTBOX_INBOX) reads the topic twice from its beginning: --sink kafka, nats or redis, not rabbitmq"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			code, _, stderr := invoke(context.Background(), nil, append([]string{"demo", "--database-url", url}, c.args...)...)
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, want 2 with %q; stderr:\n%s", code, c.want, stderr)
			}
		})
	}
}
