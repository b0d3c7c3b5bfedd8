package kinesissink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	kinesissink "github.com/outboxrelay/outboxrelay/publishers/kinesis"
)

// benchMessages are one batch: 100 events of 100 keys, 200-byte JSON.
func benchMessages(stream string) []outbox.Message {
	payload := []byte(`{"p":"` + strings.Repeat("p", 192) + `"}`)
	msgs := make([]outbox.Message, 100)
	for i := range msgs {
		msgs[i] = outbox.Message{ID: uuid.New(), Topic: stream, Key: fmt.Appendf(nil, "customer-%d", i),
			Payload: payload, Headers: map[string]string{"content-type": "application/json"}, CreatedAt: time.Now()}
	}
	return msgs
}

// BenchmarkPublish measures the sink: one Publish of a batch (one
// PutRecords: every key once) to kinesalite per iteration. Compare with
// BenchmarkBareClient.
func BenchmarkPublish(b *testing.B) {
	endpoint, c := emulator(b)
	name := stream(b, c)
	p, err := kinesissink.New(kinesissink.Config{Endpoint: endpoint})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	msgs := benchMessages(name)
	for b.Loop() {
		if err := p.Publish(context.Background(), msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkBareClient is the ceiling: the SDK's PutRecords of the same 100
// payloads, without the CloudEvent around them.
func BenchmarkBareClient(b *testing.B) {
	_, c := emulator(b)
	name := stream(b, c)
	in := &kinesis.PutRecordsInput{StreamName: aws.String(name)}
	msgs := benchMessages(name)
	for _, m := range msgs {
		in.Records = append(in.Records, types.PutRecordsRequestEntry{Data: m.Payload, PartitionKey: aws.String(string(m.Key))})
	}
	for b.Loop() {
		out, err := c.PutRecords(context.Background(), in)
		if err != nil || aws.ToInt32(out.FailedRecordCount) > 0 {
			b.Fatal(err, out)
		}
	}
	b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
}
