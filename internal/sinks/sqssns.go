package sinks

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxrelay/outboxrelay/internal/emulators"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/sqssns"
	"github.com/outboxrelay/outboxrelay/relay"
)

// The sqs sink (publishers/sqssns); its flags are --sqs-*. Its flags and
// reader take the sink's name, for SNS to follow.
func init() {
	register(Sink{Name: "sqs", About: "Amazon SQS queues, SendMessageBatch", Flags: awsFlagsOf("sqs")})
}

// awsFlags are the flags of the sqs sink.
type awsFlags struct {
	name string // "sqs"
	cfg  sqssns.Config

	endpoint, region string
	maxBytes         int
	timeout          time.Duration
}

func awsFlagsOf(name string) func(Flags) Settings {
	return func(f Flags) Settings {
		a := &awsFlags{name: name}
		f.String(&a.endpoint, name+"-endpoint", "", "endpoint replacing AWS's, http://host:port of an emulator (default: AWS's of the region)")
		f.String(&a.region, name+"-region", "", "AWS region (default: the SDK's chain, AWS_REGION or the shared config); credentials always come from the chain")
		f.Int(&a.maxBytes, name+"-max-message-bytes", sqssns.DefaultMaxMessageBytes, "largest message sent, body and attributes; a larger event fails permanently")
		f.Duration(&a.timeout, name+"-timeout", sqssns.DefaultTimeout, "bound on each request to AWS")
		return a
	}
}

// Check builds the sqssns.Config and reports every problem, naming flags.
func (a *awsFlags) Check(relay.Config) error {
	var errs problems
	if a.maxBytes <= 0 {
		errs.add(invalid(a.name+"-max-message-bytes", "must be positive"))
	}
	if a.timeout <= 0 {
		errs.add(invalid(a.name+"-timeout", "must be positive"))
	}
	a.cfg = sqssns.Config{Endpoint: a.endpoint, Region: a.region,
		MaxMessageBytes: max(a.maxBytes, 0), Timeout: max(a.timeout, 0)}
	if _, err := a.open(); err != nil {
		for _, e := range joined(err) {
			var ce *sqssns.ConfigError
			if errors.As(e, &ce) && ce.Field == "Endpoint" {
				errs.add(invalid(a.name+"-endpoint", ce.Reason))
			} else if ce == nil {
				errs.add(usage("invalid AWS configuration for --sink %s: %v", a.name, e))
			}
		}
	}
	return errs.err()
}

// open returns the publisher; it does not connect.
func (a *awsFlags) open() (*sqssns.Publisher, error) {
	return sqssns.NewSQS(a.cfg)
}

// Open returns the publisher and logs its configuration (it holds no
// secret: credentials stay in the SDK's chain).
func (a *awsFlags) Open(_ relay.Config, logger *slog.Logger, _ io.Writer) (publishers.Publisher, error) {
	p, err := a.open()
	if err != nil {
		return nil, err
	}
	logger.Info(a.name+" sink", "config", p.Config())
	return p, nil
}

// Embed starts local-aws-sqs (internal/emulators, from the npm registry)
// and points --sqs-endpoint at it; for the SDK's chain it sets placeholder
// credentials and region in this process's environment when it has none.
func (a *awsFlags) Embed() (func(), error) {
	e, err := emulators.Start("sqs")
	if err != nil {
		return nil, err
	}
	a.endpoint = e.Endpoint
	EmulatorEnv()
	return e.Close, nil
}

// awsReader reads what the sqs sink published from the SQS queue named
// after the topic (sqssns.Name). Reading deletes the messages from the
// queue, so the reader keeps what it read, and each Read hands that over
// again before reading on.
type awsReader struct {
	a    *awsFlags
	stop func() // the embedded emulator's; nil with an endpoint given
	sqs  *sqs.Client
	mu   sync.Mutex
	urls map[string]string   // topic -> queue URL
	got  map[string][]Record // topic -> what Read read
}

// Reader returns a Reader of --<sink>-endpoint; without one it embeds the
// emulator (Embed).
func (a *awsFlags) Reader() (Reader, error) {
	r := &awsReader{a: a, urls: map[string]string{}, got: map[string][]Record{}}
	if a.endpoint == "" {
		var err error
		if r.stop, err = a.Embed(); err != nil {
			return nil, err
		}
	}
	// No retries: the emulator hands a message out once (no visibility
	// timeout), so a retried ReceiveMessage would hide a lost answer's.
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRetryMaxAttempts(1)}
	if a.region != "" {
		opts = append(opts, awsconfig.WithRegion(a.region))
	}
	ac, err := awsconfig.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: load AWS configuration: %w", a.name, err)
	}
	var ep *string
	if a.endpoint != "" {
		ep = aws.String(a.endpoint)
	}
	r.sqs = sqs.NewFromConfig(ac, func(o *sqs.Options) { o.BaseEndpoint = ep })
	return r, nil
}

// Prepare creates the queue (FIFO for a .fifo topic). A queue that
// exists keeps what it holds.
func (r *awsReader) Prepare(ctx context.Context, topic string) (string, error) {
	name := sqssns.Name(topic)
	fifo := strconv.FormatBool(len(name) > 5 && name[len(name)-5:] == ".fifo")
	qattrs := map[string]string{}
	if fifo == "true" {
		qattrs["FifoQueue"] = fifo
	}
	q, err := r.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: qattrs})
	if err != nil {
		return "", fmt.Errorf("cannot create SQS queue %s (pass --%s-endpoint, or AWS credentials and region): %w", name, r.a.name, err)
	}
	r.mu.Lock()
	r.urls[topic] = aws.ToString(q.QueueUrl)
	r.mu.Unlock()
	return fmt.Sprintf("sqs:      %s, queue %s", r.endpointName(), name), nil
}

func (r *awsReader) endpointName() string {
	if r.a.endpoint == "" {
		return "AWS"
	}
	return r.a.endpoint
}

// Read hands over what earlier Reads read, then receives (and deletes)
// up to 10 messages at a time; with follow it long-polls until ctx ends.
func (r *awsReader) Read(ctx context.Context, topic string, follow bool, got func(Record), ready func()) error {
	r.mu.Lock()
	url, seen := r.urls[topic], append([]Record(nil), r.got[topic]...)
	r.mu.Unlock()
	if ready != nil {
		ready()
	}
	for _, rec := range seen {
		got(rec)
	}
	wait := int32(0)
	if follow {
		wait = 1
	}
	// A receive or delete is never abandoned when ctx ends: the messages of
	// an abandoned receive would stay invisible (in flight) for the queue's
	// visibility timeout, and a Read right after would miss them.
	whole := context.WithoutCancel(ctx)
	for {
		out, err := r.sqs.ReceiveMessage(whole, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: wait,
			MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"SentTimestamp"},
			AttributeNames: []sqstypes.QueueAttributeName{"SentTimestamp"}}) // the older name, which local-aws-sqs reads
		switch {
		case err != nil:
			return fmt.Errorf("%s: receive from %s: %w", r.a.name, url, err)
		case len(out.Messages) == 0 && ctx.Err() != nil && follow:
			return nil
		case len(out.Messages) == 0 && ctx.Err() != nil:
			return ctx.Err()
		case len(out.Messages) == 0 && !follow:
			return nil
		}
		var del []sqstypes.DeleteMessageBatchRequestEntry
		for i, m := range out.Messages {
			rec := Record{EventID: aws.ToString(m.MessageAttributes[outbox.HeaderEventID].StringValue),
				Key: sqssns.AttributeValue(m.MessageAttributes[sqssns.AttrKey]), Payload: aws.ToString(m.Body)}
			switch aws.ToString(m.MessageAttributes[sqssns.AttrBodyEncoding].StringValue) {
			case "base64":
				b, _ := base64.StdEncoding.DecodeString(rec.Payload)
				rec.Payload = string(b)
			case "empty":
				rec.Payload = ""
			}
			ms, _ := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64)
			rec.Time = time.UnixMilli(ms)
			r.mu.Lock()
			rec.Offset = int64(len(r.got[topic]))
			r.got[topic] = append(r.got[topic], rec)
			r.mu.Unlock()
			got(rec)
			del = append(del, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		if len(del) == 0 {
			continue
		}
		if _, err := r.sqs.DeleteMessageBatch(whole, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del}); err != nil {
			return fmt.Errorf("%s: delete from %s: %w", r.a.name, url, err)
		}
	}
}

// Remove deletes the queue.
func (r *awsReader) Remove(ctx context.Context, topic string) error {
	r.mu.Lock()
	url := r.urls[topic]
	r.mu.Unlock()
	if url != "" {
		if _, err := r.sqs.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
			return fmt.Errorf("%s: delete queue %s: %w", r.a.name, url, err)
		}
	}
	return nil
}

// Close stops the embedded emulator, if any.
func (r *awsReader) Close() error {
	if r.stop != nil {
		r.stop()
	}
	return nil
}

// EmulatorEnv sets placeholder AWS credentials and region in this
// process's environment, where it has none, for the SDK's chain to find:
// the emulators check no signature. The embedded brokers call it, and so
// does a program that starts one in another process (relay-bench), before
// it starts its relays.
func EmulatorEnv() {
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "emulator", "AWS_SECRET_ACCESS_KEY": "emulator", "AWS_REGION": "us-east-1"} {
		if os.Getenv(k) == "" {
			_ = os.Setenv(k, v)
		}
	}
}
