package relay

import (
	"errors"
	"testing"
	"time"
)

func TestRetentionConfig(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	if c.Retention != 168*time.Hour || c.KeepSent || c.JanitorInterval != time.Minute || c.JanitorBatch != 1000 || c.NoVacuum {
		t.Fatalf("defaults: Retention %v, KeepSent %v, JanitorInterval %v, JanitorBatch %d, NoVacuum %v; want 168h, false, 1m, 1000, false",
			c.Retention, c.KeepSent, c.JanitorInterval, c.JanitorBatch, c.NoVacuum)
	}
	cases := []struct {
		name   string
		modify func(*Config)
		field  string // "" when valid
	}{
		{"Retention 1ms", func(c *Config) { c.Retention = time.Millisecond }, ""},
		{"Retention 100 years", func(c *Config) { c.Retention = maxRetention }, ""},
		{"Retention negative", func(c *Config) { c.Retention = -time.Hour }, "Retention"},
		{"Retention beyond 100 years", func(c *Config) { c.Retention = maxRetention + 1 }, "Retention"},
		{"KeepSent with defaults", func(c *Config) { c.KeepSent = true }, ""},
		{"NoVacuum with defaults", func(c *Config) { c.NoVacuum = true }, ""},
		{"NoVacuum with KeepSent", func(c *Config) { c.NoVacuum, c.KeepSent = true, true }, ""},
		{"JanitorInterval 10ms", func(c *Config) { c.JanitorInterval = 10 * time.Millisecond }, ""},
		{"JanitorInterval 24h", func(c *Config) { c.JanitorInterval = 24 * time.Hour }, ""},
		{"JanitorInterval below 10ms", func(c *Config) { c.JanitorInterval = 10*time.Millisecond - 1 }, "JanitorInterval"},
		{"JanitorInterval negative", func(c *Config) { c.JanitorInterval = -time.Minute }, "JanitorInterval"},
		{"JanitorInterval beyond 24h", func(c *Config) { c.JanitorInterval = 24*time.Hour + 1 }, "JanitorInterval"},
		{"JanitorBatch 1", func(c *Config) { c.JanitorBatch = 1 }, ""},
		{"JanitorBatch 100000", func(c *Config) { c.JanitorBatch = 100000 }, ""},
		{"JanitorBatch negative", func(c *Config) { c.JanitorBatch = -1 }, "JanitorBatch"},
		{"JanitorBatch beyond 100000", func(c *Config) { c.JanitorBatch = 100001 }, "JanitorBatch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{}
			c.modify(&cfg)
			err := cfg.withDefaults().validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("validate = %v, want nil", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != c.field || ce.Reason == "" {
				t.Fatalf("validate = %v, want a *ConfigError for %s", err, c.field)
			}
		})
	}
}
