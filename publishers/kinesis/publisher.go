package kinesissink

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// ErrNoStream wraps the error of a stream that does not exist.
var ErrNoStream = errors.New("kinesissink: no such stream")

// Publisher publishes outbox messages to Kinesis streams. It is safe for
// concurrent use.
type Publisher struct {
	cfg    Config
	client *kinesis.Client
	http   *http.Client
}

// New returns a Publisher for cfg; it does not connect.
func New(cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ac, err := cfg.awsConfig()
	if err != nil {
		return nil, err
	}
	var ep *string
	if cfg.Endpoint != "" {
		ep = aws.String(cfg.Endpoint)
	}
	return &Publisher{cfg: cfg, client: kinesis.NewFromConfig(ac, func(o *kinesis.Options) { o.BaseEndpoint = ep }),
		http: ac.HTTPClient.(*http.Client)}, nil
}

// Config returns the configuration in use, defaults filled.
func (p *Publisher) Config() Config { return p.cfg }

// KeyBatches reports true: a key's later events of a call are not sent
// once one failed other than permanently.
func (p *Publisher) KeyBatches() bool { return true }

// pending is one event waiting for its round.
type pending struct {
	i   int // index in msgs
	rec record
}

// Publish sends msgs stream by stream, in rounds that hold at most one
// event per key (see the package documentation), and returns nil when
// every record got a sequence number, a publishers.Errors otherwise.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	results := make([]error, len(msgs))
	queues := map[string]map[string][]pending{} // stream -> partition key -> events in order
	var streams []string
	for i := range msgs {
		rec, err := toRecord(&msgs[i], p.cfg.Source)
		if err != nil {
			results[i] = publishers.Permanent(err)
			continue
		}
		stream := msgs[i].Topic
		if queues[stream] == nil {
			queues[stream] = map[string][]pending{}
			streams = append(streams, stream)
		}
		queues[stream][rec.key] = append(queues[stream][rec.key], pending{i, rec})
	}
	var down error // once Kinesis does not answer, nothing more is sent
	for _, stream := range streams {
		if down != nil {
			for _, q := range queues[stream] {
				for _, e := range q {
					results[e.i] = down
				}
			}
			continue
		}
		down = p.publishStream(ctx, stream, queues[stream], results)
	}
	return publishers.Summarize(results)
}

// publishStream sends one stream's queues in rounds until each is sent or
// stopped. It returns the error of a request Kinesis did not answer, after
// which nothing more is sent.
func (p *Publisher) publishStream(ctx context.Context, stream string, queues map[string][]pending, results []error) error {
	fail := func(q []pending, err error) {
		for _, e := range q {
			results[e.i] = err
		}
	}
	for len(queues) > 0 {
		var round []pending
		size := 0
		for key, q := range queues {
			if len(round) == maxRequestRecords || size+len(q[0].rec.data)+len(key) > maxRequestBytes {
				break
			}
			round, size = append(round, q[0]), size+len(q[0].rec.data)+len(key)
			queues[key] = q[1:]
		}
		if err := ctx.Err(); err != nil {
			for key, q := range queues {
				fail(q, fmt.Errorf("not sent: %w", err))
				delete(queues, key)
			}
			fail(round, fmt.Errorf("not sent: %w", err))
			return nil
		}
		errs, err := p.put(ctx, stream, round)
		if errors.Is(err, publishers.ErrUnavailable) {
			fail(round, err)
			for _, q := range queues {
				fail(q, err)
			}
			return err
		}
		for j, e := range round {
			if err != nil {
				results[e.i] = err
			} else {
				results[e.i] = errs[j]
			}
			if results[e.i] != nil && !publishers.IsPermanent(results[e.i]) {
				fail(queues[e.rec.key], fmt.Errorf("not sent: an earlier event of its key failed: %w", results[e.i]))
				delete(queues, e.rec.key)
			}
		}
		for key, q := range queues {
			if len(q) == 0 {
				delete(queues, key)
			}
		}
	}
	return nil
}

// put sends one PutRecords request and returns one result per record, or
// an error for the whole request.
func (p *Publisher) put(ctx context.Context, stream string, round []pending) ([]error, error) {
	in := &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: make([]types.PutRecordsRequestEntry, len(round))}
	for j, e := range round {
		in.Records[j] = types.PutRecordsRequestEntry{Data: e.rec.data, PartitionKey: aws.String(e.rec.key)}
	}
	out, err := p.client.PutRecords(ctx, in)
	if err != nil {
		return nil, classify(fmt.Errorf("kinesis: stream %s: %w", stream, err))
	}
	if len(out.Records) != len(round) {
		return nil, fmt.Errorf("kinesis: stream %s: %d results for %d records", stream, len(out.Records), len(round))
	}
	errs := make([]error, len(round))
	for j, r := range out.Records {
		if r.ErrorCode != nil {
			errs[j] = fmt.Errorf("kinesis: stream %s: record refused: %s: %s", stream, aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage))
		}
	}
	return errs, nil
}

// classify sorts an SDK error: no answer (or a ctx that ended) is
// unavailable, a missing stream or an invalid request permanent, anything
// else (throttling, 5xx, access denied) transient.
func classify(err error) error {
	var api smithy.APIError
	var send *smithyhttp.RequestSendError
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &send):
		return publishers.Unavailable(err)
	case errors.As(err, &api) && api.ErrorCode() == "ResourceNotFoundException":
		return publishers.Permanent(fmt.Errorf("%w: %w", ErrNoStream, err))
	case errors.As(err, &api) && (api.ErrorCode() == "ValidationException" || api.ErrorCode() == "InvalidArgumentException"):
		return publishers.Permanent(err)
	}
	return err
}

// Probe makes one cheap request, ListStreams of one stream.
func (p *Publisher) Probe(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kinesis: probe: %w", err)
	}
	_, err := p.client.ListStreams(ctx, &kinesis.ListStreamsInput{Limit: aws.Int32(1)})
	if err != nil {
		return classify(fmt.Errorf("kinesis: probe: %w", err))
	}
	return nil
}

// Close closes idle connections; it is idempotent.
func (p *Publisher) Close() error {
	p.http.CloseIdleConnections()
	return nil
}
