package sqssns

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/outboxrelay/outboxrelay/publishers"
)

// NewSNS returns a Publisher to SNS topics: an outbox topic is a topic ARN
// (arn:...) or a name (see Name) appended to Config.TopicARNPrefix. It
// does not connect.
func NewSNS(cfg Config) (*Publisher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ac, err := cfg.awsConfig()
	if err != nil {
		return nil, err
	}
	client := sns.NewFromConfig(ac, func(o *sns.Options) { o.BaseEndpoint = cfg.endpoint() })
	return newPublisher(cfg, &snsService{c: client, prefix: cfg.TopicARNPrefix}, ac), nil
}

// snsService publishes to SNS.
type snsService struct {
	c      *sns.Client
	prefix string
}

func (s *snsService) resolve(_ context.Context, topic string) (string, bool, error) {
	arn := topic
	if !strings.HasPrefix(topic, "arn:") {
		if s.prefix == "" {
			return "", false, publishers.Permanent(fmt.Errorf("%w: %q is not a topic ARN, and no topic ARN prefix is set", ErrNoDestination, topic))
		}
		arn = s.prefix + Name(topic)
	}
	return arn, strings.HasSuffix(arn, ".fifo"), nil
}

func (s *snsService) send(ctx context.Context, arn string, batch []entry) ([]error, error) {
	in := &sns.PublishBatchInput{TopicArn: aws.String(arn), PublishBatchRequestEntries: make([]snstypes.PublishBatchRequestEntry, len(batch))}
	for i, e := range batch {
		attrs := make(map[string]snstypes.MessageAttributeValue, len(e.attrs))
		for name, a := range e.attrs {
			typ, v := a.wire()
			if a.binary {
				attrs[name] = snstypes.MessageAttributeValue{DataType: aws.String(typ), BinaryValue: []byte(v)}
			} else {
				attrs[name] = snstypes.MessageAttributeValue{DataType: aws.String(typ), StringValue: aws.String(v)}
			}
		}
		in.PublishBatchRequestEntries[i] = snstypes.PublishBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), Message: aws.String(e.body),
			MessageAttributes: attrs, MessageGroupId: optional(e.group), MessageDeduplicationId: optional(e.dedup)}
	}
	out, err := s.c.PublishBatch(ctx, in)
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

func (s *snsService) probe(ctx context.Context) error {
	_, err := s.c.ListTopics(ctx, &sns.ListTopicsInput{})
	return err
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
