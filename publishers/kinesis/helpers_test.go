package kinesissink_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/outboxrelay/outboxrelay/internal/emulators"
	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
	kinesissink "github.com/outboxrelay/outboxrelay/publishers/kinesis"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
)

// The SDK's standard chain finds these placeholders (kinesalite checks no
// signature) unless the environment names real ones.
func TestMain(m *testing.M) {
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "emulator", "AWS_SECRET_ACCESS_KEY": "emulator",
		"AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"} {
		if os.Getenv(k) == "" {
			_ = os.Setenv(k, v)
		}
	}
	leakcheck.Main(m, "net/http.")
}

// emulator starts kinesalite for the test and returns a client of it.
func emulator(t testing.TB) (string, *kinesis.Client) {
	t.Helper()
	e, err := emulators.Start("kinesis")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ac, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return e.Endpoint, kinesis.NewFromConfig(ac, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(e.Endpoint) })
}

// stream creates a fresh stream of 2 shards and returns its name.
func stream(t testing.TB, c *kinesis.Client) string {
	t.Helper()
	name := fmt.Sprintf("test-%08x", rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	if err := kinesis.NewStreamExistsWaiter(c).Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(name)}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return name
}

// read returns every record of the stream, shard by shard from the
// start, each shard's records in order.
func read(t testing.TB, c *kinesis.Client, name string) []publisherstest.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shards, err := c.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	var out []publisherstest.Record
	for _, sh := range shards.Shards {
		it, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(name), ShardId: sh.ShardId,
			ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err != nil {
			t.Fatal(err)
		}
		for iter := it.ShardIterator; iter != nil; {
			res, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Records {
				e, err := kinesissink.Decode(r.Data)
				if err != nil {
					t.Fatalf("record %s of %s: %v", aws.ToString(r.SequenceNumber), name, err)
				}
				out = append(out, publisherstest.Record{Topic: name, Stream: aws.ToString(sh.ShardId), Key: e.Key,
					Value: e.Payload, Headers: e.Headers, EventID: e.ID})
			}
			if len(res.Records) == 0 && aws.ToInt64(res.MillisBehindLatest) == 0 {
				break
			}
			iter = res.NextShardIterator
		}
	}
	return out
}

// hostport is the host:port of an http:// endpoint.
func hostport(endpoint string) string { return strings.TrimPrefix(endpoint, "http://") }
