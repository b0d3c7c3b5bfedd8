package sqssns_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxrelay/outboxrelay/internal/emulators"
	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
	"github.com/outboxrelay/outboxrelay/publishers/sqssns"
)

// The SDK's standard chain finds these placeholders (the emulator checks
// no signature) unless the environment names real ones.
func TestMain(m *testing.M) {
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "emulator", "AWS_SECRET_ACCESS_KEY": "emulator",
		"AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"} {
		if os.Getenv(k) == "" {
			_ = os.Setenv(k, v)
		}
	}
	leakcheck.Main(m, "github.com/outboxrelay/outboxrelay/publishers/sqssns.", "net/http.")
}

// startService starts local-aws-sqs (scripts/emulators, from the npm
// registry) for the test and returns its URL.
func startService(t testing.TB) string {
	t.Helper()
	e, err := emulators.Start("sqs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.Endpoint
}

// clients are the test's own SQS and SNS clients of an endpoint.
type clients struct {
	sqs *sqs.Client
	mu  sync.Mutex
	got map[string][]publisherstest.Record // per queue URL, what Read received
}

func newClients(t testing.TB, endpoint string) *clients {
	// No retries: the emulator hands a message out once, so a retried
	// ReceiveMessage would hide what the lost answer held.
	ac, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRetryMaxAttempts(1),
		awsconfig.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) { tr.DisableKeepAlives = true })))
	if err != nil {
		t.Fatal(err)
	}
	return &clients{
		sqs: sqs.NewFromConfig(ac, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) }),
		got: map[string][]publisherstest.Record{},
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// queue creates a fresh queue (FIFO when fifo) and returns its name and URL.
func (c *clients) queue(t testing.TB, fifo bool) (string, string) {
	name := fmt.Sprintf("test-%08x", rand.Uint32())
	attrs := map[string]string{}
	if fifo {
		name += ".fifo"
		attrs["FifoQueue"] = "true"
	}
	out, err := c.sqs.CreateQueue(testCtx(t), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	return name, aws.ToString(out.QueueUrl)
}

// read returns every message the queue at url received so far, as
// records of topic.
func (c *clients) read(t testing.TB, topic, url string) []publisherstest.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		out, err := c.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"All"},
			AttributeNames: []sqstypes.QueueAttributeName{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return c.got[url]
		}
		// Delete what arrived: a FIFO queue hands out none of a group's
		// messages while earlier ones are in flight.
		var del []sqstypes.DeleteMessageBatchRequestEntry
		for k, m := range out.Messages {
			del = append(del, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(k)), ReceiptHandle: m.ReceiptHandle})
			r := publisherstest.Record{Topic: topic, Value: []byte(aws.ToString(m.Body)), Headers: map[string]string{},
				Stream: m.Attributes["MessageGroupId"]}
			for name, a := range m.MessageAttributes {
				if name == "outbox-key" {
					r.Key = []byte(sqssns.AttributeValue(a))
					continue
				}
				r.Headers[name] = sqssns.AttributeValue(a)
			}
			r.EventID = r.Headers["outbox-event-id"]
			switch r.Headers[sqssns.AttrBodyEncoding] {
			case "base64":
				r.Value, _ = base64.StdEncoding.DecodeString(string(r.Value))
			case "empty":
				r.Value = nil
			}
			delete(r.Headers, sqssns.AttrBodyEncoding)
			c.got[url] = append(c.got[url], r)
		}
		if _, err := c.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del}); err != nil {
			t.Fatal(err)
		}
	}
}
