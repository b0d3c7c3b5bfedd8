package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/outboxrelay/outboxrelay/internal/emulators"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	kinesissink "github.com/outboxrelay/outboxrelay/publishers/kinesis"
)

// relay run --sink kinesis puts every committed event, and none rolled
// back, into the stream of its topic on kinesalite, as a CloudEvent whose
// id, key, payload and headers are the event's, partitioned by its key;
// for an --ordered-topics topic each key's events are in the order they
// were written. Read back with the SDK, every shard from its start.
func TestRunWithKinesisSink(t *testing.T) {
	t.Parallel()
	e, err := emulators.Start("kinesis")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	pool, table := testdb.New(t)
	ctx := context.Background()
	ac, err := awsconfig.LoadDefaultConfig(ctx) // the placeholders of sink_sqs_test.go's init

	if err != nil {
		t.Fatal(err)
	}
	c := kinesis.NewFromConfig(ac, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(e.Endpoint) })
	topics := []string{"e2e.orders", "e2e.payments"}
	for _, s := range topics {
		if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(s), ShardCount: aws.Int32(2)}); err != nil {
			t.Fatal(err)
		}
		if err := kinesis.NewStreamExistsWaiter(c).Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(s)}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}

	committed, want := sinkEvents(t, pool, table, topics)

	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema, "OUTBOX_KINESIS_ENDPOINT": e.Endpoint}
	logs := runUntilSent(t, pool, table, len(committed), env, "--sink", "kinesis", "--ordered-topics", topics[0])
	if !strings.Contains(logs, `"msg":"kinesis sink"`) || strings.Contains(logs, awsTestSecret) {
		t.Errorf("the sink's configuration is not logged, or credentials are:\n%s", logs)
	}

	order := map[string][]string{}
	for _, s := range topics {
		shards, err := c.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(s)})
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range shards.Shards {
			it, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(s), ShardId: sh.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Records {
				ev, err := kinesissink.Decode(r.Data)
				m, ok := committed[ev.ID]
				if err != nil || !ok {
					t.Errorf("record %s of %s: event %q (%v) was not committed, or arrived twice", aws.ToString(r.SequenceNumber), s, ev.ID, err)
					continue
				}
				delete(committed, ev.ID)
				if string(ev.Key) != string(m.Key) || (ev.Key == nil) != (m.Key == nil) || string(ev.Payload) != string(m.Payload) ||
					fmt.Sprint(ev.Headers) != fmt.Sprint(m.Headers) || aws.ToString(r.PartitionKey) != kinesissink.PartitionKey(&m) {
					t.Errorf("event %s arrived as key %q, payload %q, headers %v, partition key %q; written as %+v", ev.ID, ev.Key, ev.Payload, ev.Headers, aws.ToString(r.PartitionKey), m)
				}
				if s == topics[0] && m.Key != nil {
					order[string(m.Key)] = append(order[string(m.Key)], ev.ID)
				}
			}
		}
	}
	for id := range committed {
		t.Errorf("committed event %s did not arrive", id)
	}
	for key, ids := range want {
		if !slices.Equal(order[key], ids) {
			t.Errorf("ordered topic, key %q: arrived in the order %v, written in the order %v", key, order[key], ids)
		}
	}
}
