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
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Ordered delivery on MariaDB through the binary: `migrate up --ordered`
// prepares the table; three relays with --ordered-topics serve it while
// writers commit each key's events one transaction at a time; one relay is
// killed with SIGKILL mid-stream and its shards come back when their
// lease lapses. Every key's events reach Kafka in write order, duplicates
// allowed.
func TestMySQLOrderedSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	db, url, _ := mysqlURL(t)
	const (
		topic   = "mysql.ordered"
		keys    = 48
		perKey  = 10
		writers = 4
	)
	br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	bin := buildBinary(t)
	env := append(os.Environ(), "OUTBOX_DATABASE_URL="+url, "OUTBOX_KAFKA_BROKERS="+strings.Join(br.Addrs(), ","))
	migrate := exec.Command(bin, "migrate", "up", "--ordered")
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil || !strings.Contains(string(out), "prepared") {
		t.Fatalf("relay migrate up --ordered: %v\n%s", err, out)
	}

	procs := startRelays(t, bin, env, 3, func(i int) []string {
		return []string{"--ordered-topics", "*", "--shards", "8", "--batch-size", "5", "--poll-interval", "20ms",
			"--lease", "2s", "--relay-id", fmt.Sprintf("my-%d", i), "--log-format", "json"}
	})

	// Each writer commits the events of its keys in turn, one per
	// transaction: a key's write order is its commit order.
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for seq := range perKey {
				for k := w; k < keys; k += writers {
					key := fmt.Sprintf("key-%02d", k)
					tx, err := db.BeginTx(context.Background(), nil)
					if err == nil {
						_, err = outbox.WriteBatch(context.Background(), outbox.FromMySQL(tx),
							[]outbox.Message{{Topic: topic, Key: []byte(key), Payload: fmt.Appendf(nil, "%s:%d", key, seq)}})
					}
					if err == nil {
						err = tx.Commit()
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	deadline := time.Now().Add(60 * time.Second)
	for countMySQL(t, db, "outbox", "sent") < 100 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 100 sent after 60s; stderr:\n%s", procs[0].stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // the table's state: nothing to await but the rows
	}
	if err := procs[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = procs[0].cmd.Wait()
	wg.Wait()
	deadline = time.Now().Add(90 * time.Second)
	for countMySQL(t, db, "outbox", "sent") < keys*perKey {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sent after 90s; stderr:\n%s", countMySQL(t, db, "outbox", "sent"), keys*perKey, procs[1].stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // the table's state: nothing to await but the rows
	}
	for i, p := range procs[1:] {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("replica %d exited with %v; stderr:\n%s", i+1, err, p.stderr.String())
		}
	}
	dups := kafkatest.CheckKeyOrder(t, kafkatest.ReadTopic(t, br.Addrs(), topic, nil), keys, perKey)
	t.Logf("%d duplicates", dups)
}
