package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// With --route rules, relay run sends each topic to its rule's sink at the
// rule's destination (here Kafka and stdout side by side), and an event of
// a topic no rule matches fails with a reason instead of being dropped.
func TestRoutesSendEachTopicToItsSink(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"routed.orders.created"}})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	ctx := context.Background()
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	write := func(topic string) string {
		t.Helper()
		res, err := w.Write(ctx, pool, outbox.Message{Topic: topic, Key: []byte("k"), Payload: []byte("to " + topic)})
		if err != nil {
			t.Fatal(err)
		}
		return res.ID.String()
	}
	order, audit, lost := write("orders.created"), write("audit"), write("billing.paid")

	routesFile := filepath.Join(t.TempDir(), "routes")
	if err := os.WriteFile(routesFile, []byte("# shipping goes to stdout as it is\nshipping.*=stdout\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"OUTBOX_DATABASE_URL":  testdb.URL(t),
		"OUTBOX_SCHEMA":        table.Schema,
		"OUTBOX_KAFKA_BROKERS": strings.Join(br.Addrs(), ","),
		// Two rules from the variable, more from a file after them.
		"OUTBOX_ROUTE":       "orders.*=kafka:routed.{topic}\naudit=stdout:audit-log",
		"OUTBOX_ROUTES_FILE": routesFile,
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out, errOut syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- run(runCtx, []string{"run", "--poll-interval", "20ms", "--log-format", "json"},
			func(k string) string { return env[k] }, &out, &errOut)
	}()
	status := func(id string) (s, lastError string) {
		_ = pool.QueryRow(ctx, "SELECT status, coalesce(last_error, '') FROM "+table.Ident()+" WHERE id = $1", id).Scan(&s, &lastError)
		return s, lastError
	}
	defer func() {
		if t.Failed() {
			t.Logf("stderr:\n%s", errOut.String())
		}
	}()
	await(t, 15*time.Second, func() bool {
		a, _ := status(order)
		b, _ := status(audit)
		c, _ := status(lost)
		return a == "sent" && b == "sent" && c == "failed"
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d; stderr:\n%s", code, errOut.String())
	}

	recs := kafkatest.ReadTopic(t, br.Addrs(), "routed.orders.created", nil)
	if len(recs) != 1 || recs[0].EventID() != order || string(recs[0].Value) != "to orders.created" {
		t.Errorf("Kafka topic routed.orders.created holds %+v; want the one orders.created event", recs)
	}
	if lines := out.String(); !strings.Contains(lines, audit) || !strings.Contains(lines, `"topic":"audit-log"`) || strings.Contains(lines, order) {
		t.Errorf("stdout does not hold the audit event at audit-log alone:\n%s", lines)
	}
	if _, reason := status(lost); !strings.Contains(reason, `no route for the topic "billing.paid"`) {
		t.Errorf("the unrouted event failed with %q; want a reason naming its topic", reason)
	}
	if !strings.Contains(errOut.String(), `"rules":["orders.*=kafka:routed.{topic}","audit=stdout:audit-log","shipping.*=stdout"]`) || !strings.Contains(errOut.String(), "no catch-all rule") {
		t.Errorf("the start-up log does not list the routes and the missing catch-all:\n%s", errOut.String())
	}
}

// What can be known wrong with routes before start is a usage error naming
// the flag: a bad rule, an unknown sink, --sink beside --route, and an
// ordered topic no rule matches.
func TestRouteUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--route", "orders"}, "want PATTERN=SINK"},
		{[]string{"--route", "*=carrier-pigeon"}, `names the sink "carrier-pigeon"`},
		{[]string{"--route", "*=stdout", "--sink", "stdout"}, "--sink (OUTBOX_SINK) and --route set together"},
		{[]string{"--route", "orders.*=stdout", "--ordered-topics", "billing"}, `--ordered-topics names "billing", which no --route rule matches`},
		{[]string{"--routes-file", "/no/such/file"}, "invalid value for --routes-file"},
	} {
		code, _, stderr := invoke(context.Background(), map[string]string{"OUTBOX_DATABASE_URL": "postgres://nobody@127.0.0.1:1/x"}, append([]string{"run"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("run %q: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

// --ordered-topics takes the patterns --route does: a pattern is refused
// when no rule matches any of its topics, or when it matches no valid
// topic; one that shares a topic with some rule is taken as it is.
func TestOrderedTopicPatternsAgainstRoutes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		routes  []string
		ordered string
		want    string // in the usage error; "" for none
	}{
		{[]string{"orders.*=stdout"}, "orders.*", ""},
		{[]string{"orders.*=stdout"}, "orders.c*,orders.paid", ""},
		{[]string{"orders.created=stdout"}, "orders.*", ""},
		{[]string{"orders.*=stdout", "billing.*=stdout"}, "*.created", ""},
		{[]string{"orders.*=stdout"}, "*", ""},
		{[]string{"orders.*=stdout"}, "billing.*", `--ordered-topics names "billing.*", which no --route rule matches`},
		{[]string{"orders.*=stdout"}, "*.created,orders-*", `--ordered-topics names "orders-*", which no --route rule matches`},
		{[]string{"*=stdout"}, "orders/*", `invalid value for --ordered-topics (OUTBOX_ORDERED_TOPICS): "orders/*" matches no valid topic`},
		{[]string{"*=stdout"}, "*,.", `invalid value for --ordered-topics (OUTBOX_ORDERED_TOPICS): "." matches no valid topic`},
	} {
		f := newFlags("relay run", "", io.Discard, func(string) string { return "" })
		var o runOptions
		o.register(f)
		args := []string{"--database-url", "postgres://app@127.0.0.1:1/postgres", "--ordered-topics", c.ordered}
		for _, r := range c.routes {
			args = append(args, "--route", r)
		}
		if err := f.parse(args); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.config()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("routes %q, --ordered-topics %q: %v; want no error", c.routes, c.ordered, err)
		case c.want == "" && strings.Join(cfg.relay.Ordering.Topics, ",") != c.ordered:
			t.Errorf("routes %q, --ordered-topics %q: Ordering.Topics = %q", c.routes, c.ordered, cfg.relay.Ordering.Topics)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("routes %q, --ordered-topics %q: %v; want an error with %q", c.routes, c.ordered, err, c.want)
		}
	}
}
