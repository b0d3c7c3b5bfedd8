package sqssns_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/sqssns"
)

// benchBatch is the number of messages per Publish, each with a 200-byte
// payload, a header and a key.
const benchBatch = 100

func benchMessages(topic string) []outbox.Message {
	payload := []byte(strings.Repeat("p", 200))
	msgs := make([]outbox.Message, benchBatch)
	for i := range msgs {
		msgs[i] = outbox.Message{ID: uuid.New(), Topic: topic, Key: []byte("customer-" + string(rune('a'+i%26))),
			Payload: payload, Headers: map[string]string{"content-type": "application/json"}, Attempt: 1, CreatedAt: time.Now()}
	}
	return msgs
}

// BenchmarkPublish measures the sqs sink: one Publish of 100 messages to
// a FIFO queue of local-aws-sqs per iteration. Compare with
// BenchmarkBareClient.
func BenchmarkPublish(b *testing.B) {
	url0 := startService(b)
	c := newClients(b, url0)
	name, _ := c.queue(b, true)
	p, err := sqssns.NewSQS(sqssns.Config{Endpoint: url0})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	msgs := benchMessages(name)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		for i := range msgs {
			msgs[i].ID = uuid.New() // past the deduplication window
		}
		if err := p.Publish(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkBareClient is the ceiling: the SDK alone sending the same 100
// messages as 10 SendMessageBatch calls of 10, one after the other, with
// the same attributes, group and deduplication ids.
func BenchmarkBareClient(b *testing.B) {
	url0 := startService(b)
	c := newClients(b, url0)
	_, url := c.queue(b, true)
	msgs := benchMessages("")
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		for start := 0; start < len(msgs); start += 10 {
			in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(url)}
			for i, m := range msgs[start : start+10] {
				in.Entries = append(in.Entries, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)),
					MessageBody: aws.String(string(m.Payload)), MessageGroupId: aws.String(string(m.Key)),
					MessageDeduplicationId: aws.String(uuid.NewString()),
					MessageAttributes: map[string]sqstypes.MessageAttributeValue{
						"content-type":    {DataType: aws.String("String"), StringValue: aws.String("application/json")},
						"outbox-event-id": {DataType: aws.String("String"), StringValue: aws.String(m.ID.String())},
						"outbox-key":      {DataType: aws.String("Binary"), BinaryValue: m.Key},
					}})
			}
			out, err := c.sqs.SendMessageBatch(ctx, in)
			if err != nil || len(out.Failed) > 0 {
				b.Fatal(err, out)
			}
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}
