package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Every sink of the registry but Kafka, which the other tests run, runs
// against the local servers (NATS with JetStream, RabbitMQ, Redis; the
// webhook receiver is the harness's own): burn-down delivers every event
// once and measures the sink ceiling beside the SQL one; steady measures
// every event's latency.
func TestSinks(t *testing.T) {
	t.Parallel()
	for _, sink := range Sinks {
		if sink == "kafka" {
			continue
		}
		t.Run(sink, func(t *testing.T) {
			t.Parallel()
			t.Run("burn-down", func(t *testing.T) {
				cfg := newConfig(t, ModeBurnDown)
				cfg.Sink, cfg.Events, cfg.BatchSize, cfg.CeilingRows, cfg.CeilingClients = sink, 2000, 100, 4000, []int{1}
				rep := run(t, cfg)
				r := rep.Runs[0]
				if r.Events != 2000 || r.Sent != 2000 || r.Received != 2000 || r.Duplicates != 0 || r.Missing != 0 {
					t.Errorf("events %d, sent %d, received %d, duplicates %d, missing %d: want 2000 drained and delivered once",
						r.Events, r.Sent, r.Received, r.Duplicates, r.Missing)
				}
				c := rep.SinkCeiling
				if c == nil || c.Sink != sink || c.Events != 2000 || c.Batch != 100 || c.EventsPerSecond <= 0 || c.Publish == nil || c.Publish.N != 20 {
					t.Fatalf("sink ceiling %+v: want 2000 %s events in 20 batches of 100 at a positive rate", c, sink)
				}
				if r.SinkCeilingRatio == nil || *r.SinkCeilingRatio <= 0 || r.CeilingRatio == nil {
					t.Errorf("sink ceiling ratio %v, SQL ceiling ratio %v: want both", r.SinkCeilingRatio, r.CeilingRatio)
				}
				if rep.Settings.Sink != sink || rep.Settings.SinkURL == "" || strings.Contains(rep.Settings.SinkURL, "guest:guest") {
					t.Errorf("settings name sink %q at %q: want %s, its URL without a password", rep.Settings.Sink, rep.Settings.SinkURL, sink)
				}
				checkCommon(t, r)
				var doc map[string]any
				b, _ := json.Marshal(rep)
				if err := json.Unmarshal(b, &doc); err != nil || doc["sink_ceiling"] == nil {
					t.Errorf("JSON lacks sink_ceiling: %s", b)
				}
			})
			t.Run("steady", func(t *testing.T) {
				cfg := newConfig(t, ModeSteady)
				cfg.Sink, cfg.Rate, cfg.Duration, cfg.Writers = sink, 200, 2*time.Second, 4
				rep := run(t, cfg)
				r := rep.Runs[0]
				if r.Events < 390 || r.Missing != 0 || r.Duplicates != 0 || r.Received != r.Events {
					t.Errorf("events %d, received %d, missing %d, duplicates %d: want about 400, each delivered once",
						r.Events, r.Received, r.Missing, r.Duplicates)
				}
				if s := r.Steady; s == nil || s.Latency == nil || s.Latency.N != r.Events {
					t.Errorf("steady stats %+v: want a latency per event", s)
				}
				if rep.SinkCeiling != nil || r.SinkCeilingRatio != nil {
					t.Errorf("steady mode has a sink ceiling")
				}
				checkCommon(t, r)
			})
		})
	}
}
