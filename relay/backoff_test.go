package relay

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/outbox"
)

func TestRetryDelayBounds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		lo, hi time.Duration
	}{
		{"defaults", time.Second, 5 * time.Minute},
		{"small", 10 * time.Millisecond, time.Second},
		{"min equals max", 2 * time.Second, 2 * time.Second},
		{"max not a power of two of min", 100 * time.Millisecond, 7 * time.Second},
		{"huge max", time.Millisecond, 1000 * time.Hour},
	}
	const samples = 200
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for attempt := 1; attempt <= 70; attempt++ {
				// The interval before jitter is lo doubled per attempt, capped
				// at hi; jitter spreads it over ±50%, and the result is
				// capped at hi again. Floats: lo*2^69 overflows a Duration.
				base := math.Min(float64(c.lo)*math.Pow(2, float64(attempt-1)), float64(c.hi))
				lower := time.Duration(0.5 * base)
				upper := time.Duration(math.Min(1.5*base, float64(c.hi)))
				var seenBelowBase, seenAboveBase bool
				for range samples {
					d := retryDelay(attempt, c.lo, c.hi)
					// +1ns: the library rounds its float interval to whole ns.
					if d < lower || d > upper+1 || d > c.hi {
						t.Fatalf("retryDelay(%d, %v, %v) = %v, want within [%v, %v]", attempt, c.lo, c.hi, d, lower, upper)
					}
					seenBelowBase = seenBelowBase || float64(d) < base
					seenAboveBase = seenAboveBase || float64(d) > base
				}
				// Jitter means the samples spread on both sides of the base
				// (only below it once the cap is reached).
				if !seenBelowBase || (!seenAboveBase && base < float64(c.hi)) {
					t.Fatalf("attempt %d: %d samples show no jitter around %v", attempt, samples, time.Duration(base))
				}
			}
		})
	}
}

func TestRetryDelayNonPositiveAttemptIsFirst(t *testing.T) {
	t.Parallel()
	for _, attempt := range []int{0, -1, math.MinInt} {
		for range 100 {
			if d := retryDelay(attempt, time.Second, time.Minute); d < 500*time.Millisecond || d > 1500*time.Millisecond {
				t.Fatalf("retryDelay(%d, 1s, 1m) = %v, want the first attempt's [500ms, 1.5s]", attempt, d)
			}
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	want := Config{
		Table:            outbox.Table{Schema: "public", Name: "outbox"},
		BatchSize:        1000,
		BatchMin:         100,
		BatchBytes:       4 << 20,
		MaxEventBytes:    16 << 20,
		Workers:          2,
		Lease:            30 * time.Second,
		PollInterval:     500 * time.Millisecond,
		PollMin:          5 * time.Millisecond,
		MaxAttempts:      10,
		BackoffMin:       time.Second,
		BackoffMax:       5 * time.Minute,
		PublishTimeout:   time.Minute,
		ShutdownTimeout:  10 * time.Second,
		OutageBackoffMin: 100 * time.Millisecond,
		OutageBackoffMax: 30 * time.Second,
		ProbeInterval:    250 * time.Millisecond,
		Retention:        7 * 24 * time.Hour,
		JanitorInterval:  time.Minute,
		JanitorBatch:     1000,
		Claim:            ClaimLease,
	}
	if c.ID == "" || c.Logger != slog.Default() {
		t.Fatalf("ID %q and Logger %p: want a generated id and slog.Default()", c.ID, c.Logger)
	}
	got := c
	got.ID, got.Logger = "", nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", got, want)
	}
	if err := c.validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if other := (Config{}).withDefaults(); other.ID == c.ID {
		t.Fatalf("two replicas got the same default id %q", c.ID)
	}
}

func TestConfigDefaultsKeepSetFields(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	in := Config{
		Table: outbox.Table{Schema: "app", Name: "events"}, ID: "me", BatchSize: 7, BatchMin: 3, BatchBytes: 1 << 10, MaxEventBytes: 1 << 9, Workers: 2, Claim: ClaimLock, Lease: 2 * time.Second,
		PollInterval: time.Millisecond, PollMin: time.Millisecond, MaxAttempts: 3, BackoffMin: 2 * time.Second, BackoffMax: 3 * time.Second,
		PublishTimeout: 4 * time.Second, ShutdownTimeout: 5 * time.Second, OutageBackoffMin: 6 * time.Second,
		OutageBackoffMax: 8 * time.Second, ProbeInterval: 7 * time.Millisecond, Retention: time.Hour, JanitorInterval: 9 * time.Second, JanitorBatch: 10,
		Logger: log,
	}
	if got := in.withDefaults(); !reflect.DeepEqual(got, in) {
		t.Fatalf("withDefaults changed set fields:\n got %+v\nwant %+v", got, in)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		field  string
		modify func(*Config)
	}{
		{"Table", func(c *Config) { c.Table.Name = `outbox"; DROP` }},
		{"Table", func(c *Config) { c.Table.Schema = "a.b" }},
		{"BatchSize", func(c *Config) { c.BatchSize = -1 }},
		{"BatchSize", func(c *Config) { c.BatchSize = 10001 }},
		{"BatchMin", func(c *Config) { c.BatchMin = -1 }},
		{"BatchMin", func(c *Config) { c.BatchMin, c.BatchSize = 501, 500 }},
		{"BatchBytes", func(c *Config) { c.BatchBytes = -1 }},
		{"MaxEventBytes", func(c *Config) { c.MaxEventBytes = -1 }},
		{"Lease", func(c *Config) { c.Lease = time.Second - 1 }},
		{"Lease", func(c *Config) { c.Lease = -time.Minute }},
		{"PollInterval", func(c *Config) { c.PollInterval = time.Millisecond - 1 }},
		{"PollMin", func(c *Config) { c.PollMin = -time.Millisecond }},
		{"PollMin", func(c *Config) { c.PollMin, c.PollInterval = time.Second, 100*time.Millisecond }},
		{"MaxAttempts", func(c *Config) { c.MaxAttempts = -1 }},
		{"BackoffMin", func(c *Config) { c.BackoffMin = -time.Second }},
		{"BackoffMax", func(c *Config) { c.BackoffMin, c.BackoffMax = time.Minute, time.Minute-1 }},
		{"BackoffMax", func(c *Config) { c.BackoffMax = -1 }},
		{"PublishTimeout", func(c *Config) { c.PublishTimeout = -1 }},
		{"ShutdownTimeout", func(c *Config) { c.ShutdownTimeout = -1 }},
		{"OutageBackoffMin", func(c *Config) { c.OutageBackoffMin = -1 }},
		{"OutageBackoffMax", func(c *Config) { c.OutageBackoffMin, c.OutageBackoffMax = time.Second, time.Second-1 }},
		{"OutageBackoffMax", func(c *Config) { c.OutageBackoffMax = -1 }},
		{"ProbeInterval", func(c *Config) { c.ProbeInterval = -1 }},
		{"ProbeInterval", func(c *Config) { c.ProbeInterval = 2 * time.Minute }},
		{"ID", func(c *Config) { c.ID = strings.Repeat("r", 201) }},
		{"Claim", func(c *Config) { c.Claim = "optimistic" }},
		{"Claim", func(c *Config) { c.Claim = "LOCK" }},
		{"Ordering.Topics", func(c *Config) { c.Ordering.Topics = []string{"orders.*", "orders/*"} }},
		{"Ordering.Topics", func(c *Config) { c.Ordering.Topics = []string{"*", ""} }},
	}
	for _, c := range cases {
		t.Run(c.field, func(t *testing.T) {
			t.Parallel()
			cfg := Config{}
			c.modify(&cfg)
			err := cfg.withDefaults().validate()
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("validate = %v (%T), want a *ConfigError", err, err)
			}
			if ce.Field != c.field {
				t.Fatalf("Field = %q, want %q (error: %v)", ce.Field, c.field, err)
			}
			if ce.Reason == "" || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("Error() = %q, want it to name %s and say why", err, c.field)
			}
		})
	}
}

func TestConfigValidateBoundaries(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		modify func(*Config)
	}{
		{"BatchSize 1", func(c *Config) { c.BatchSize = 1 }},
		{"BatchSize 10000", func(c *Config) { c.BatchSize = 10000 }},
		{"BatchMin = BatchSize", func(c *Config) { c.BatchMin, c.BatchSize = 50, 50 }},
		{"BatchSize below DefaultBatchMin", func(c *Config) { c.BatchSize = 10 }},
		{"Lease 1s", func(c *Config) { c.Lease = time.Second }},
		{"PollInterval 1ms", func(c *Config) { c.PollInterval = time.Millisecond }},
		{"PollMin equals PollInterval", func(c *Config) { c.PollMin, c.PollInterval = time.Second, time.Second }},
		{"MaxAttempts 1", func(c *Config) { c.MaxAttempts = 1 }},
		{"BackoffMax equals BackoffMin", func(c *Config) { c.BackoffMin, c.BackoffMax = time.Second, time.Second }},
		{"OutageBackoffMax equals min", func(c *Config) { c.OutageBackoffMin, c.OutageBackoffMax = time.Second, time.Second }},
		{"ID 200 bytes", func(c *Config) { c.ID = strings.Repeat("r", 200) }},
		{"Claim lock", func(c *Config) { c.Claim = ClaimLock }},
		{"Claim lease", func(c *Config) { c.Claim = ClaimLease }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{}
			c.modify(&cfg)
			if err := cfg.withDefaults().validate(); err != nil {
				t.Fatalf("validate = %v, want nil", err)
			}
		})
	}
}

// New checks the config without touching the database.
func TestNewReturnsConfigError(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = New(pool, nopPublisher{}, Config{BatchSize: -5})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "BatchSize" {
		t.Fatalf("New = %v, want a *ConfigError for BatchSize", err)
	}
	if _, err := New(nil, nopPublisher{}, Config{}); err == nil {
		t.Fatal("New(nil pool) succeeded")
	}
	if _, err := New(pool, nil, Config{}); err == nil {
		t.Fatal("New(nil publisher) succeeded")
	}
	r, err := New(pool, nopPublisher{}, Config{ID: "replica-1"})
	if err != nil || r.ID() != "replica-1" {
		t.Fatalf("New = %v, %v; want a relay with ID replica-1", r, err)
	}
}

type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, []outbox.Message) error { return nil }
func (nopPublisher) Close() error                                    { return nil }
