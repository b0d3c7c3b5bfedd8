package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	pubsubsink "github.com/outboxrelay/outboxrelay/publishers/pubsub"
)

// relay run --sink pubsub publishes every committed event, and none rolled
// back, to the topic of the same id on the Google client's fake (pstest,
// on 127.0.0.1), with its id, key, payload and headers as attributes and,
// for an --ordered-topics topic, each key's events in the order they were
// written, read back through ordered subscriptions with the Google client.
func TestRunWithPubSubSink(t *testing.T) {
	t.Parallel()
	srv := pstest.NewServerWithAddress("127.0.0.1:0")
	t.Cleanup(func() { _ = srv.Close() })
	pool, table := testdb.New(t)
	ctx := context.Background()
	const project = "outboxrelay-e2e"
	client, err := pubsub.NewClient(ctx, project, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	topics := []string{"orders", "payments"}
	for _, topic := range topics {
		name := "projects/" + project + "/topics/" + topic
		if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: name}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
			Name: "projects/" + project + "/subscriptions/" + topic, Topic: name, EnableMessageOrdering: true,
		}); err != nil {
			t.Fatal(err)
		}
	}

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
	var committed []outbox.Message
	for i := range 30 {
		m := outbox.Message{
			Topic: topics[i%2], Key: fmt.Appendf(nil, "customer-%d", i%3), Payload: fmt.Appendf(nil, `{"seq":%d}`, i),
			Headers: map[string]string{"content-type": "application/json", "seq": fmt.Sprint(i)},
		}
		switch i % 10 {
		case 9:
			m.Key = nil
		case 7:
			m.Key = []byte{0xfe, 'x', byte(i)} // not UTF-8: outbox-key-base64
		}
		committed = append(committed, write(pool, m))
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rolledBack []outbox.Message
	for i := range 5 {
		rolledBack = append(rolledBack, write(tx, outbox.Message{Topic: "orders", Key: []byte("customer-0"), Payload: fmt.Appendf(nil, "rolled back %d", i)}))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	env := map[string]string{
		"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema,
		"OUTBOX_PUBSUB_PROJECT": project, "OUTBOX_PUBSUB_ENDPOINT": srv.Addr,
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runOut, runErr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "pubsub", "--ordered-topics", "orders", "--poll-interval", "20ms", "--log-format", "json"},
			func(k string) string { return env[k] }, &runOut, &runErr)
	}()
	testdb.AwaitSent(t, pool, table, len(committed), 30*time.Second)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d; stderr:\n%s", code, runErr.String())
	}
	if logs := runErr.String(); !strings.Contains(logs, `"msg":"pubsub sink"`) || !strings.Contains(logs, project) {
		t.Errorf("the sink's configuration is not logged:\n%s", logs)
	}

	got := map[string]*pubsubpb.PubsubMessage{}
	order := map[string][]string{} // topic/key -> event ids in delivery order
	for _, topic := range topics {
		for _, m := range pullAll(t, client, "projects/"+project+"/subscriptions/"+topic) {
			id := m.Attributes[outbox.HeaderEventID]
			if _, dup := got[id]; dup {
				t.Errorf("event %s arrived twice", id)
			}
			got[id] = m
			if m.OrderingKey != "" {
				order[topic+"/"+m.OrderingKey] = append(order[topic+"/"+m.OrderingKey], id)
			}
		}
	}
	want := map[string][]string{}
	for _, m := range committed {
		id := m.ID.String()
		a, ok := got[id]
		if !ok {
			t.Errorf("committed event %s (%s, key %q) did not arrive", id, m.Topic, m.Key)
			continue
		}
		delete(got, id)
		key, err := pubsubsink.Key(a.Attributes)
		headers := map[string]string{}
		for k, v := range a.Attributes {
			if k != outbox.HeaderEventID && k != pubsubsink.AttrKey && k != pubsubsink.AttrKeyBase64 {
				headers[k] = v
			}
		}
		if err != nil || (key == nil) != (m.Key == nil) || string(key) != string(m.Key) || string(a.Data) != string(m.Payload) {
			t.Errorf("event %s arrived with key %q (%v), payload %q; written with key %q, payload %q", id, key, err, a.Data, m.Key, m.Payload)
		}
		if fmt.Sprint(headers) != fmt.Sprint(m.Headers) {
			t.Errorf("event %s: headers %v arrived as %v", id, m.Headers, headers)
		}
		if m.Key != nil {
			want[m.Topic+"/"+a.OrderingKey] = append(want[m.Topic+"/"+a.OrderingKey], id)
		}
	}
	for _, m := range rolledBack {
		if _, ok := got[m.ID.String()]; ok {
			t.Errorf("rolled-back event %s arrived", m.ID)
			delete(got, m.ID.String())
		}
	}
	for id := range got {
		t.Errorf("event %s arrived but was never written", id)
	}
	for k, ids := range want {
		if strings.HasPrefix(k, "orders/") && !slices.Equal(order[k], ids) {
			t.Errorf("ordered topic, key %s: arrived in the order %v, written in the order %v", k, order[k], ids)
		}
	}
}

// pullAll pulls and acknowledges sub until a pull comes back empty.
func pullAll(t *testing.T, c *pubsub.Client, sub string) []*pubsubpb.PubsubMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []*pubsubpb.PubsubMessage
	for {
		res, err := c.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 100, ReturnImmediately: true}) //nolint:staticcheck // pstest honours it
		if err != nil {
			t.Fatalf("pull %s: %v", sub, err)
		}
		if len(res.ReceivedMessages) == 0 {
			return out
		}
		var ids []string
		for _, rm := range res.ReceivedMessages {
			out = append(out, rm.Message)
			ids = append(ids, rm.AckId)
		}
		if err := c.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: ids}); err != nil {
			t.Fatalf("ack %s: %v", sub, err)
		}
	}
}

// Every bad --pubsub-* flag is reported, all at once, each naming the flag
// and its variable.
func TestPubSubSinkBadFlags(t *testing.T) {
	t.Parallel()
	code, _, stderr := invoke(context.Background(), map[string]string{"OUTBOX_PUBSUB_PUBLISH_TIMEOUT": "0s"},
		"run", "--sink", "pubsub", "--database-url", "postgres://postgres@127.0.0.1:1/postgres",
		"--pubsub-max-message-bytes", "20000000")
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
	}
	for _, flag := range []string{
		"--pubsub-project (OUTBOX_PUBSUB_PROJECT) is required", "--pubsub-publish-timeout (OUTBOX_PUBSUB_PUBLISH_TIMEOUT)",
		"--pubsub-max-message-bytes (OUTBOX_PUBSUB_MAX_MESSAGE_BYTES)",
	} {
		if !strings.Contains(stderr, flag) {
			t.Errorf("stderr does not name %s:\n%s", flag, stderr)
		}
	}
}
