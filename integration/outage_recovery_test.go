package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"log/slog"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/relay"
)

// After a Kafka outage (the broker gone, then back on the same port) the
// relay, with default outage settings, publishes within a second of the
// broker's return and drains what the outage deferred at its normal speed,
// however long the outage lasted: it probes the broker cheaply every
// ProbeInterval instead of backing off ever longer, and the deferred rows
// are due at once. It logs the outage once when it starts, with the
// broker's error, and once when it ends, with its length and the rows it
// deferred; at start-up it logs whether the broker answers.
func TestKafkaOutageRecoveryIsPrompt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opts := kfakebroker.Options{Port: freePort(t), Topics: []string{"orders"}, DataDir: t.TempDir()}
	br := startBroker(t, opts)
	pub := newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs()}) // default timeouts, as users run it
	logs := &logLines{}
	rr := b.startRelay(pub, relay.Config{Logger: slog.New(slog.NewJSONHandler(logs, nil))})

	b.writeN(5, "orders", "before")
	await(t, 15*time.Second, func() bool { return b.count("status = 'sent'") == 5 }, "events not sent before the outage: %v", b.statuses())

	br.Close()
	during := b.writeN(100, "orders", "during")
	await(t, 10*time.Second, func() bool { return logs.count("sink unavailable; pausing claims until it answers") > 0 },
		"the outage was not logged: %s", logs)
	// The outage lasts long enough for a doubling backoff to wait seconds
	// between probes; more rows come meanwhile.
	time.Sleep(4 * time.Second)
	during = append(during, b.writeN(200, "orders", "later")...)
	time.Sleep(4 * time.Second)
	if n := b.count("status = 'processing' AND id = ANY($1)", during); n != 0 {
		t.Errorf("%d rows held during the outage; want none (no claims while the sink is down)", n)
	}
	if n := b.count("attempt <> 0 AND status = 'pending' AND id = ANY($1)", during); n != 0 {
		t.Errorf("%d deferred rows spent an attempt", n)
	}

	startBroker(t, opts)
	healed := b.dbNow()
	var firstSent, lastSent time.Time
	await(t, 30*time.Second, func() bool { return b.count("status = 'sent' AND id = ANY($1)", during) == len(during) },
		"the backlog did not drain after the outage: %v", b.statuses())
	if err := b.pool.QueryRow(b.ctx, b.sql(`SELECT min(sent_at), max(sent_at) FROM {{table}} WHERE id = ANY($1)`), during).Scan(&firstSent, &lastSent); err != nil {
		t.Fatal(err)
	}
	toFirst, toDrained := firstSent.Sub(healed), lastSent.Sub(healed)
	t.Logf("broker back; first publish after %v, %d deferred rows drained after %v", toFirst.Round(time.Millisecond), len(during), toDrained.Round(time.Millisecond))
	if toFirst > time.Second {
		t.Errorf("first publish %v after the broker was back, want within 1s", toFirst)
	}
	if toDrained > 3*time.Second {
		t.Errorf("the %d deferred rows drained %v after the broker was back, want within 3s", len(during), toDrained)
	}
	if err := rr.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}

	if n := logs.count("sink reachable"); n != 1 {
		t.Errorf("%d start-up lines saying the sink is reachable, want 1: %s", n, logs)
	}
	down := logs.find("sink unavailable; pausing claims until it answers")
	if len(down) != 1 {
		t.Fatalf("%d lines saying the outage started, want 1 per relay: %s", len(down), logs)
	}
	if e, _ := down[0]["error"].(string); e == "" || down[0]["level"] != "WARN" {
		t.Errorf("the outage's start does not say why at WARN: %v", down[0])
	}
	up := logs.find("sink answers again; resuming")
	if len(up) != 1 {
		t.Fatalf("%d lines saying the outage ended, want 1: %s", len(up), logs)
	}
	if up[0]["level"] != "INFO" || up[0]["outage"] == nil || up[0]["deferred"] == nil {
		t.Errorf("the outage's end does not give its length and deferred rows at INFO: %v", up[0])
	}
}

// A relay started while its broker is down says so, claims nothing, and
// starts publishing within a second of the broker's arrival.
func TestKafkaRelayStartsBeforeItsBroker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opts := kfakebroker.Options{Port: freePort(t), Topics: []string{"orders"}}
	pub := newKafkaPublisher(t, kafka.Config{Brokers: []string{fmt.Sprintf("127.0.0.1:%d", opts.Port)}, DialTimeout: time.Second, WriteTimeout: 2 * time.Second})
	logs := &logLines{}
	written := b.writeN(20, "orders", "early")
	rr := b.startRelay(pub, relay.Config{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	await(t, 10*time.Second, func() bool { return logs.count("sink unavailable; pausing claims until it answers") == 1 },
		"no start-up line saying the sink is unreachable: %s", logs)
	if n := b.count("attempt <> 0 OR status <> 'pending'"); n != 0 {
		t.Errorf("%d rows touched while the broker was not there yet: %v", n, b.rows("true"))
	}
	startBroker(t, opts)
	arrived := b.dbNow()
	await(t, 10*time.Second, func() bool { return b.count("status = 'sent'") == len(written) }, "nothing sent after the broker arrived: %v", b.statuses())
	var first time.Time
	if err := b.pool.QueryRow(b.ctx, b.sql(`SELECT min(sent_at) FROM {{table}}`)).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if d := first.Sub(arrived); d > time.Second {
		t.Errorf("first publish %v after the broker arrived, want within 1s", d)
	}
	if err := rr.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// logLines collects JSON log lines.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// find returns the lines whose message is msg.
func (l *logLines) find(msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(l.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func (l *logLines) count(msg string) int { return len(l.find(msg)) }
