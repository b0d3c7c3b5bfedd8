package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxrelay/outboxrelay/internal/emulators"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/sqssns"
)

// awsTestSecret is the secret key the SDK's chain finds in these tests
// (the emulator checks no signature); it must never be logged.
const awsTestSecret = "e2e-aws-secret-hunter2"

func init() {
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "e2e", "AWS_SECRET_ACCESS_KEY": awsTestSecret,
		"AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"} {
		if os.Getenv(k) == "" {
			_ = os.Setenv(k, v)
		}
	}
}

// relay run --sink sqs publishes every committed event, and none rolled
// back, to the queue of its topic on local-aws-sqs (from the npm
// registry), with id, key, payload and headers intact and a FIFO queue's
// keys in order, read back with the SDK; no secret is logged.
func TestRunWithSQSSink(t *testing.T) {
	t.Parallel()
	const sink = "sqs"
	e, err := emulators.Start("sqs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	endpoint := e.Endpoint
	ctx := context.Background()
	ac, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sq := sqs.NewFromConfig(ac, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	base := "e2e-" + hex.EncodeToString(b)
	topics := []string{base + ".orders.fifo", base + ".payments"} // the first FIFO and ordered
	urls := map[string]string{}
	for _, topic := range topics {
		name, fifo := sqssns.Name(topic), strings.HasSuffix(topic, ".fifo")
		attrs := map[string]string{}
		if fifo {
			attrs["FifoQueue"] = "true" // local-aws-sqs, as SQS, takes no FifoQueue on a standard queue
		}
		q, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err != nil {
			t.Fatal(err)
		}
		urls[topic] = aws.ToString(q.QueueUrl)
	}

	pool, table := testdb.New(t)
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
		m := outbox.Message{Topic: topics[i%2], Key: fmt.Appendf(nil, "customer-%d", i%3), Payload: fmt.Appendf(nil, `{"seq":%d}`, i),
			Headers: map[string]string{"content-type": "application/json", "seq": fmt.Sprint(i)}}
		if i%10 == 9 {
			m.Key = nil
		}
		committed = append(committed, write(pool, m))
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

	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema}
	args := []string{"run", "--sink", sink, "--" + sink + "-endpoint", endpoint,
		"--ordered-topics", topics[0], "--poll-interval", "20ms", "--log-format", "json"}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runOut, runErr syncbuf.Buffer
	done := make(chan int, 1)
	go func() { done <- run(runCtx, args, func(k string) string { return env[k] }, &runOut, &runErr) }()
	testdb.AwaitSent(t, pool, table, len(committed), 30*time.Second)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d; stderr:\n%s", code, runErr.String())
	}
	logs := runErr.String()
	if !strings.Contains(logs, `"msg":"`+sink+` sink"`) || !strings.Contains(logs, endpoint) {
		t.Errorf("the sink's configuration is not logged:\n%s", logs)
	}
	if strings.Contains(logs+runOut.String(), awsTestSecret) {
		t.Errorf("the AWS secret key is logged:\n%s", logs)
	}

	// Read back with the SDK, not through the sink.
	type arrived struct {
		topic, key, payload string
		hasKey              bool
		headers             map[string]string
	}
	got, order := map[string]arrived{}, map[string][]string{}
	for _, topic := range topics {
		for {
			out, err := sq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls[topic]), MaxNumberOfMessages: 10,
				MessageAttributeNames: []string{"All"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Messages) == 0 {
				break
			}
			for _, m := range out.Messages {
				a := arrived{topic: topic, payload: aws.ToString(m.Body), headers: map[string]string{}}
				for name, v := range m.MessageAttributes {
					if name == sqssns.AttrKey {
						a.key, a.hasKey = string(v.BinaryValue), true
					} else if name != outbox.HeaderEventID {
						a.headers[name] = aws.ToString(v.StringValue)
					}
				}
				id := aws.ToString(m.MessageAttributes[outbox.HeaderEventID].StringValue)
				if _, dup := got[id]; dup {
					t.Errorf("event %s arrived twice", id)
				}
				got[id] = a
				if a.hasKey {
					order[topic+"/"+a.key] = append(order[topic+"/"+a.key], id)
				}
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
		if a.topic != m.Topic || a.hasKey != (m.Key != nil) || a.key != string(m.Key) || a.payload != string(m.Payload) ||
			fmt.Sprint(a.headers) != fmt.Sprint(m.Headers) {
			t.Errorf("event %s arrived as %+v, written as %s, key %q, payload %q, headers %v", id, a, m.Topic, m.Key, m.Payload, m.Headers)
		}
		if m.Key != nil {
			want[m.Topic+"/"+string(m.Key)] = append(want[m.Topic+"/"+string(m.Key)], id)
		}
	}
	for id := range got {
		t.Errorf("event %s arrived but was never committed (rolled back, or never written)", id)
	}
	for k, ids := range want {
		if strings.HasPrefix(k, topics[0]+"/") && !slices.Equal(order[k], ids) {
			t.Errorf("FIFO ordered topic, key %s: arrived in the order %v, written in the order %v", k, order[k], ids)
		}
	}
}

// Every bad --sqs-* flag is reported, all at once, each naming the flag
// and its variable.
func TestSQSSinkBadFlags(t *testing.T) {
	t.Parallel()
	for _, sink := range []string{"sqs"} {
		code, _, stderr := invoke(context.Background(), map[string]string{"OUTBOX_" + strings.ToUpper(sink) + "_TIMEOUT": "0s"},
			"run", "--sink", sink, "--database-url", "postgres://postgres@127.0.0.1:1/postgres",
			"--"+sink+"-endpoint", "ftp://host", "--"+sink+"-max-message-bytes", "-1")
		if code != 2 {
			t.Fatalf("%s: exit %d, want 2; stderr:\n%s", sink, code, stderr)
		}
		for _, flag := range []string{"endpoint", "max-message-bytes", "timeout"} {
			name := fmt.Sprintf("--%s-%s (OUTBOX_%s_%s)", sink, flag, strings.ToUpper(sink), strings.ToUpper(strings.ReplaceAll(flag, "-", "_")))
			if !strings.Contains(stderr, name) {
				t.Errorf("stderr does not name %s:\n%s", name, stderr)
			}
		}
	}
}
