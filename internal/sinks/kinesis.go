package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/outboxrelay/outboxrelay/internal/emulators"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
	kinesissink "github.com/outboxrelay/outboxrelay/publishers/kinesis"
	"github.com/outboxrelay/outboxrelay/relay"
)

// kinesisSink publishes to Amazon Kinesis Data Streams
// (publishers/kinesis); its flags are --kinesis-*.
func init() { register(kinesisSink) }

var kinesisSink = Sink{
	Name:        "kinesis",
	About:       "Amazon Kinesis Data Streams, partition key = event key",
	CloudEvents: cloudevents.Kinesis,
	Flags: func(f Flags) Settings {
		k := &kinesisFlags{}
		k.register(f)
		return k
	},
}

// kinesisFlags are the Kinesis sink's flags.
type kinesisFlags struct {
	endpoint, region string
	timeout          time.Duration
}

func (k *kinesisFlags) register(f Flags) {
	f.String(&k.endpoint, "kinesis-endpoint", "", "endpoint replacing AWS's, http://host:port of an emulator (default: AWS's of the region)")
	f.String(&k.region, "kinesis-region", "", "AWS region (default: the SDK's chain: AWS_REGION, the shared config file); credentials always come from the SDK's chain, never logged")
	f.Duration(&k.timeout, "kinesis-timeout", kinesissink.DefaultTimeout, "bound on one request; the SDK does not retry, the relay does")
}

func (k *kinesisFlags) config() kinesissink.Config {
	return kinesissink.Config{Endpoint: k.endpoint, Region: k.region, Timeout: k.timeout}
}

// Check reports every problem of the flags, naming each flag.
func (k *kinesisFlags) Check(relay.Config) error {
	if k.timeout <= 0 {
		return invalid("kinesis-timeout", "must be positive")
	}
	return nil
}

// Open returns the Kinesis publisher and logs its configuration (which
// holds no secret: credentials stay with the SDK).
func (k *kinesisFlags) Open(_ relay.Config, logger *slog.Logger, _ io.Writer) (publishers.Publisher, error) {
	p, err := kinesissink.New(k.config())
	if err != nil {
		return nil, err
	}
	logger.Info("kinesis sink", "config", p.Config().String())
	return p, nil
}

// Embed starts kinesalite (internal/emulators, from the npm registry) and
// points --kinesis-endpoint at it; for the SDK's chain it sets placeholder
// credentials and region in this process's environment when it has none.
func (k *kinesisFlags) Embed() (func(), error) {
	e, err := emulators.Start("kinesis")
	if err != nil {
		return nil, err
	}
	k.endpoint = e.Endpoint
	EmulatorEnv()
	return e.Close, nil
}

// kinesisReader reads a stream of 2 shards per topic, each shard from its
// start, with the SDK.
type kinesisReader struct {
	stop func()
	c    *kinesis.Client
}

// Reader returns a Reader of --kinesis-endpoint; without one it embeds
// kinesalite (Embed).
func (k *kinesisFlags) Reader() (Reader, error) {
	r := &kinesisReader{}
	if k.endpoint == "" {
		var err error
		if r.stop, err = k.Embed(); err != nil {
			return nil, err
		}
	}
	opts := []func(*awsconfig.LoadOptions) error{}
	if k.region != "" {
		opts = append(opts, awsconfig.WithRegion(k.region))
	}
	ac, err := awsconfig.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("kinesis: load the AWS configuration: %w", err), r.Close())
	}
	ep := aws.String(k.endpoint)
	r.c = kinesis.NewFromConfig(ac, func(o *kinesis.Options) { o.BaseEndpoint = ep })
	return r, nil
}

// Prepare creates a stream of 2 shards named topic and waits until it is
// active.
func (r *kinesisReader) Prepare(ctx context.Context, topic string) (string, error) {
	if _, err := r.c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(topic), ShardCount: aws.Int32(2)}); err != nil {
		return "", fmt.Errorf("cannot create Kinesis stream %s (pass --kinesis-endpoint, or AWS credentials and region): %w", topic, err)
	}
	if err := kinesis.NewStreamExistsWaiter(r.c).Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(topic)}, time.Minute); err != nil {
		return "", fmt.Errorf("kinesis: stream %s: %w", topic, err)
	}
	return fmt.Sprintf("kinesis:  stream %s, 2 shards", topic), nil
}

// kinesisPoll is how long a shard's reader waits after a GetRecords that
// found nothing new while it follows: Kinesis has no push.
const kinesisPoll = 100 * time.Millisecond

// Read reads each shard of topic's stream from its start, the shards in
// parallel (got from one goroutine at a time); Record.Partition is the
// shard's index.
func (r *kinesisReader) Read(ctx context.Context, topic string, follow bool, got func(Record), ready func()) error {
	shards, err := r.c.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(topic)})
	if err != nil {
		return fmt.Errorf("kinesis: shards of %s: %w", topic, err)
	}
	if ready != nil {
		ready()
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(shards.Shards))
	for n, sh := range shards.Shards {
		wg.Go(func() {
			errs[n] = r.readShard(ctx, topic, aws.ToString(sh.ShardId), follow, func(rec Record) {
				rec.Partition = n
				mu.Lock()
				defer mu.Unlock()
				got(rec)
			})
		})
	}
	wg.Wait()
	if follow && ctx.Err() != nil {
		return nil
	}
	return errors.Join(errs...)
}

func (r *kinesisReader) readShard(ctx context.Context, topic, shard string, follow bool, got func(Record)) error {
	it, err := r.c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(topic), ShardId: aws.String(shard),
		ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		return fmt.Errorf("kinesis: %s/%s: %w", topic, shard, err)
	}
	var offset int64
	for iter := it.ShardIterator; iter != nil; {
		res, err := r.c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
		if err != nil {
			return fmt.Errorf("kinesis: %s/%s: %w", topic, shard, err)
		}
		for _, kr := range res.Records {
			e, _ := kinesissink.Decode(kr.Data) // a record it cannot decode arrives without id
			got(Record{EventID: e.ID, Key: string(e.Key), Payload: string(e.Payload), Offset: offset, Time: aws.ToTime(kr.ApproximateArrivalTimestamp)})
			offset++
		}
		iter = res.NextShardIterator
		if len(res.Records) == 0 && aws.ToInt64(res.MillisBehindLatest) == 0 {
			if !follow {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(kinesisPoll):
			}
		}
	}
	return nil
}

// Remove deletes topic's stream.
func (r *kinesisReader) Remove(ctx context.Context, topic string) error {
	if _, err := r.c.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(topic)}); err != nil {
		return fmt.Errorf("kinesis: delete stream %s: %w", topic, err)
	}
	return nil
}

// Close stops the embedded emulator, if any.
func (r *kinesisReader) Close() error {
	if r.stop != nil {
		r.stop()
	}
	return nil
}
