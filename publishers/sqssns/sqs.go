package sqssns

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// NewSQS returns a Publisher to SQS queues: an outbox topic is a queue URL
// (http:// or https://) or a queue name (see Name), whose URL GetQueueUrl
// finds once. It does not connect.
func NewSQS(cfg Config) (*Publisher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ac, err := cfg.awsConfig()
	if err != nil {
		return nil, err
	}
	return &Publisher{cfg: cfg, c: sqs.NewFromConfig(ac, func(o *sqs.Options) { o.BaseEndpoint = cfg.endpoint() }),
		client: ac.HTTPClient.(*http.Client)}, nil
}

// resolve returns the URL of an outbox topic's queue and whether it is
// FIFO.
func (s *Publisher) resolve(ctx context.Context, topic string) (string, bool, error) {
	if strings.HasPrefix(topic, "https://") || strings.HasPrefix(topic, "http://") {
		return topic, strings.HasSuffix(topic, ".fifo"), nil
	}
	name := Name(topic)
	if u, ok := s.urls.Load(name); ok {
		return u.(string), strings.HasSuffix(name, ".fifo"), nil
	}
	out, err := s.c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return "", false, err
	}
	s.urls.Store(name, aws.ToString(out.QueueUrl))
	return aws.ToString(out.QueueUrl), strings.HasSuffix(name, ".fifo"), nil
}

// send sends one batch (at most 10 entries) and returns one result per
// entry, or an error for the whole batch.
func (s *Publisher) send(ctx context.Context, url string, batch []entry) ([]error, error) {
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: make([]sqstypes.SendMessageBatchRequestEntry, len(batch))}
	for i, e := range batch {
		attrs := make(map[string]sqstypes.MessageAttributeValue, len(e.attrs))
		for name, a := range e.attrs {
			typ, v := a.wire()
			if a.binary {
				attrs[name] = sqstypes.MessageAttributeValue{DataType: aws.String(typ), BinaryValue: []byte(v)}
			} else {
				attrs[name] = sqstypes.MessageAttributeValue{DataType: aws.String(typ), StringValue: aws.String(v)}
			}
		}
		in.Entries[i] = sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(e.body),
			MessageAttributes: attrs, MessageGroupId: optional(e.group), MessageDeduplicationId: optional(e.dedup)}
	}
	out, err := s.c.SendMessageBatch(ctx, in)
	if err != nil {
		return nil, err
	}
	results := make([]error, len(batch))
	acked := make([]bool, len(batch))
	for _, ok := range out.Successful {
		if i, err := strconv.Atoi(aws.ToString(ok.Id)); err == nil && i < len(batch) {
			acked[i] = true
		}
	}
	for _, f := range out.Failed {
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i < len(batch) {
			results[i] = entryError(aws.ToString(f.Code), aws.ToString(f.Message), f.SenderFault)
			acked[i] = true
		}
	}
	return unanswered(results, acked), nil
}

// probe makes one cheap request.
func (s *Publisher) probe(ctx context.Context) error {
	_, err := s.c.ListQueues(ctx, &sqs.ListQueuesInput{MaxResults: aws.Int32(1)})
	return err
}

// optional is s as an optional field: nil when empty.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// unanswered sets an error on each entry the response did not mention.
func unanswered(results []error, answered []bool) []error {
	for i, ok := range answered {
		if !ok {
			results[i] = fmt.Errorf("sqssns: entry %d not in the response", i)
		}
	}
	return results
}
