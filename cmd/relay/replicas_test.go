package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Three `relay run` processes drain one table into a Kafka-protocol broker
// over TCP: every committed event arrives exactly once with its key and
// payload, each replica does part of the work, and all exit 0 on SIGTERM.
func TestThreeRelayProcessesDeliverEveryEventOnce(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"replicas.test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	bin := buildBinary(t)

	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	const total = 3000
	want := map[string]string{} // event id -> key/payload
	for start := 0; start < total; start += 500 {
		msgs := make([]outbox.Message, 500)
		for i := range msgs {
			n := start + i
			msgs[i] = outbox.Message{Topic: "replicas.test", Key: fmt.Appendf(nil, "key-%d", n%37), Payload: fmt.Appendf(nil, "event-%d", n)}
		}
		res, err := w.WriteBatch(ctx, pool, msgs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			want[r.ID.String()] = string(msgs[i].Key) + "/" + string(msgs[i].Payload)
		}
	}

	var procs []*exec.Cmd
	var logs []*strings.Builder
	for i := 0; i < 3; i++ {
		cmd := exec.Command(bin, "run", "--batch-size", "50", "--poll-interval", "20ms", "--relay-id", fmt.Sprintf("proc-%d", i))
		cmd.Env = append(os.Environ(),
			"OUTBOX_DATABASE_URL="+testdb.URL(t), "OUTBOX_SCHEMA="+table.Schema,
			"OUTBOX_KAFKA_BROKERS="+strings.Join(br.Addrs(), ","))
		var stderr strings.Builder
		cmd.Stderr = &lockedBuilder{b: &stderr}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs, logs = append(procs, cmd), append(logs, &stderr)
	}
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
		}
	}()

	testdb.AwaitSent(t, pool, table, total, 60*time.Second)
	for i, p := range procs {
		if err := p.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(); err != nil {
			t.Errorf("replica %d exited with %v; stderr:\n%s", i, err, logs[i].String())
		}
	}

	got := map[string]int{}
	for _, r := range kafkatest.ReadTopic(t, br.Addrs(), "replicas.test", nil) {
		id := r.EventID()
		got[id]++
		if want[id] != string(r.Key)+"/"+string(r.Value) {
			t.Errorf("event %s arrived as %q/%q, want %q", id, r.Key, r.Value, want[id])
		}
	}
	if len(got) != total {
		t.Errorf("%d distinct events on the topic, want %d", len(got), total)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("event %s arrived %d times", id, n)
		}
	}
	rows, err := pool.Query(ctx, "SELECT regexp_replace(locked_by, '#[0-9]+$', ''), count(*) FROM "+table.Ident()+" GROUP BY 1")
	if err != nil {
		t.Fatal(err)
	}
	perReplica := map[string]int{}
	for rows.Next() {
		var who string
		var n int
		if err := rows.Scan(&who, &n); err != nil {
			t.Fatal(err)
		}
		perReplica[who] = n
	}
	if len(perReplica) < 2 {
		t.Errorf("work was not shared: %v", perReplica)
	}
}

// lockedBuilder lets exec's copying goroutine and the test share a builder.
type lockedBuilder struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
