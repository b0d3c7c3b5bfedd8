package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// sinkEvents writes what a sink's end-to-end test publishes: 30 committed
// events alternating between topics[0] (the ordered one) and topics[1],
// keys customer-0 to -2, every tenth without a key and every tenth from
// the eighth with a key that is not UTF-8, JSON payloads, content-type and
// seq headers; then 5 events of topics[0] rolled back. It returns the
// committed events by id, and the ids of topics[0]'s keyed events by key,
// in write order.
func sinkEvents(t *testing.T, pool *pgxpool.Pool, table outbox.Table, topics []string) (map[string]outbox.Message, map[string][]string) {
	t.Helper()
	ctx := context.Background()
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	write := func(tx outbox.Executor, m outbox.Message) outbox.Message {
		t.Helper()
		res, err := w.Write(ctx, tx, m)
		if err != nil {
			t.Fatal(err)
		}
		m.ID = res.ID
		return m
	}
	committed, order := map[string]outbox.Message{}, map[string][]string{}
	for i := range 30 {
		m := outbox.Message{Topic: topics[i%2], Key: fmt.Appendf(nil, "customer-%d", i%3), Payload: fmt.Appendf(nil, `{"seq":%d}`, i),
			Headers: map[string]string{"content-type": "application/json", "seq": fmt.Sprint(i)}}
		switch i % 10 {
		case 9:
			m.Key = nil
		case 7:
			m.Key = []byte{0xfe, 'x', byte(i)}
		}
		m = write(pool, m)
		committed[m.ID.String()] = m
		if m.Topic == topics[0] && m.Key != nil {
			order[string(m.Key)] = append(order[string(m.Key)], m.ID.String())
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		write(tx, outbox.Message{Topic: topics[0], Key: []byte("customer-0"), Payload: fmt.Appendf(nil, "rolled back %d", i)})
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	return committed, order
}
