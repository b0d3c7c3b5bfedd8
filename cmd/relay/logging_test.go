package main

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		dsn    string
		secret string // must not appear in the output; "" when there is none
		want   string
	}{
		{"URL with password", "postgres://app:s3cr3tpw@db.example:5432/orders?sslmode=require", "s3cr3tpw",
			"postgres://app:xxxxx@db.example:5432/orders?sslmode=require"},
		{"postgresql scheme", "postgresql://app:s3cr3tpw@db/orders", "s3cr3tpw", "postgresql://app:xxxxx@db/orders"},
		{"URL with escaped password", "postgres://app:p%40ss%2Fw0rd@db/orders", "w0rd", "postgres://app:xxxxx@db/orders"},
		{"URL with empty password", "postgres://app:@db/orders", "", "postgres://app:xxxxx@db/orders"},
		{"password in the query", "postgres://app@db/orders?password=s3cr3tpw&sslmode=disable", "s3cr3tpw",
			"postgres://app@db/orders?password=xxxxx&sslmode=disable"},
		{"password in both places", "postgres://app:userinfopw@db/orders?password=querypw", "pw",
			"postgres://app:xxxxx@db/orders?password=xxxxx"},
		{"URL without password", "postgres://app@db:5432/orders?sslmode=disable", "",
			"postgres://app@db:5432/orders?sslmode=disable"},
		{"URL without user", "postgres://db/orders", "", "postgres://db/orders"},
		{"key=value", "host=db user=app password=s3cr3tpw dbname=orders", "s3cr3tpw",
			"host=db user=app password=xxxxx dbname=orders"},
		{"key=value quoted", "host=db password='quoted s3cr3t' dbname=orders", "s3cr3t",
			"host=db password=xxxxx dbname=orders"},
		{"key=value quoted with escaped quote", `password='it\'s s3cr3t' host=db`, "s3cr3t", "password=xxxxx host=db"},
		{"key=value spaces around =", "host=db password = s3cr3tpw", "s3cr3tpw", "host=db password = xxxxx"},
		{"key=value upper case", "PASSWORD=s3cr3tpw host=db", "s3cr3tpw", "PASSWORD=xxxxx host=db"},
		{"key=value password last", "host=db password=s3cr3tpw", "s3cr3tpw", "host=db password=xxxxx"},
		// libpq (and pgx) read an unquoted value up to an unescaped space:
		// "se\ cret" is one value.
		{"key=value escaped space", `host=db password=s3cr\ 3tpw dbname=orders`, "3tpw",
			"host=db password=xxxxx dbname=orders"},
		{"key=value without password", "host=db user=app dbname=orders", "", "host=db user=app dbname=orders"},
		{"unparseable URL", "postgres://app:hunter2@[::1", "hunter2", "(unparseable database URL)"},
		{"unparseable URL, bad port", "postgres://app:hunter2@db:port/x", "hunter2", "(unparseable database URL)"},
		{"mysql URL", "mysql://app:s3cr3tpw@db.example:3306/shop?tls=true", "s3cr3tpw", "mysql://app:xxxxx@db.example:3306/shop?tls=true"},
		{"mariadb URL, escaped password", "mariadb://app:p%40ss%2Fw0rd@db/shop", "w0rd", "mariadb://app:xxxxx@db/shop"},
		{"mysql URL without password", "mysql://app@db/shop?parseTime=true", "", "mysql://app@db/shop?parseTime=true"},
		{"mysql URL, upper-case scheme", "MySQL://app:s3cr3tpw@db/shop", "s3cr3tpw", "mysql://app:xxxxx@db/shop"},
		{"unparseable mysql URL", "mysql://app:hunter2@[::1/shop", "hunter2", "(unparseable database URL)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := redactDSN(c.dsn)
			if got != c.want {
				t.Errorf("redactDSN(%q) = %q, want %q", c.dsn, got, c.want)
			}
			if c.secret != "" && strings.Contains(got, c.secret) {
				t.Errorf("redactDSN(%q) = %q leaks %q", c.dsn, got, c.secret)
			}
		})
	}
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	cases := []struct{ flag, env string }{
		{"sink", "OUTBOX_SINK"},
		{"batch-size", "OUTBOX_BATCH_SIZE"},
		{"database-url", "OUTBOX_DATABASE_URL"},
		{"kafka-brokers", "OUTBOX_KAFKA_BROKERS"},
		{"log-level", "OUTBOX_LOG_LEVEL"},
		{"a-b-c", "OUTBOX_A_B_C"},
		{"already_snake", "OUTBOX_ALREADY_SNAKE"},
	}
	for _, c := range cases {
		t.Run(c.flag, func(t *testing.T) {
			t.Parallel()
			if got := envName(c.flag); got != c.env {
				t.Fatalf("envName(%q) = %q, want %q", c.flag, got, c.env)
			}
		})
	}
}

func TestSplitList(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   ", nil},
		{",,", nil},
		{" , ,", nil},
		{"a", []string{"a"}},
		{"a,b", []string{"a", "b"}},
		{" a , b ,c ", []string{"a", "b", "c"}},
		{"a,,b,", []string{"a", "b"}},
		{"host1:9092,host2:9092", []string{"host1:9092", "host2:9092"}},
		{"a b,c", []string{"a b", "c"}},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			t.Parallel()
			if got := splitList(c.in); !slices.Equal(got, c.want) {
				t.Fatalf("splitList(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// Durations are logged in one readable form, time.Duration's, in JSON as
// in text, at the top level, in groups and in values that log themselves
// (like the Kafka sink's configuration): JSON would write nanoseconds.
func TestLogsWriteDurationsAsText(t *testing.T) {
	t.Parallel()
	log := func(format string) string {
		var b strings.Builder
		logger, err := newLogger(&b, format, "info")
		if err != nil {
			t.Fatal(err)
		}
		logger.Info("relay started", "lease", 30*time.Second, "retention", 168*time.Hour,
			slog.Group("outage", slog.Duration("backoff_max", 90*time.Second)),
			"config", durationLogger{100 * time.Microsecond})
		return b.String()
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(log("json")), &line); err != nil {
		t.Fatal(err)
	}
	config, _ := line["config"].(map[string]any)
	outage, _ := line["outage"].(map[string]any)
	for _, c := range []struct {
		name string
		got  any
		want string
	}{
		{"lease", line["lease"], "30s"},
		{"retention", line["retention"], "168h0m0s"},
		{"outage.backoff_max", outage["backoff_max"], "1m30s"},
		{"config.batch_timeout", config["batch_timeout"], "100µs"},
	} {
		if c.got != c.want {
			t.Errorf("JSON %s = %#v, want %q", c.name, c.got, c.want)
		}
	}
	text := log("text")
	for _, want := range []string{"lease=30s", "retention=168h0m0s", "outage.backoff_max=1m30s", "config.batch_timeout=100µs"} {
		if !strings.Contains(text, want) {
			t.Errorf("text log lacks %s:\n%s", want, text)
		}
	}
}

// durationLogger logs itself as a group holding a duration.
type durationLogger struct{ batchTimeout time.Duration }

func (d durationLogger) LogValue() slog.Value {
	return slog.GroupValue(slog.Duration("batch_timeout", d.batchTimeout))
}
