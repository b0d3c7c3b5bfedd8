package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// Fetch settings: a long poll that the broker answers as soon as one byte
// is there, so a record's receive time is within a round trip of its
// append.
const (
	fetchMaxWait    = 250 * time.Millisecond
	fetchMaxBytes   = 16 << 20
	fetchRetryWait  = 50 * time.Millisecond
	fetchMaxRetries = 200 // 10s of consecutive failures
)

// admin runs fn with a client of brokers and closes its connections after.
func admin(brokers []string, fn func(*kafkago.Client) error) error {
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	return fn(&kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr})
}

// createTopic creates topic with the given partitions (replication 1).
func createTopic(ctx context.Context, brokers []string, topic string, partitions int) error {
	return admin(brokers, func(c *kafkago.Client) error {
		res, err := c.CreateTopics(ctx, &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{
			{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1},
		}})
		if err == nil {
			err = res.Errors[topic]
		}
		if err != nil {
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
		return nil
	})
}

// deleteTopic deletes topic, freeing the embedded broker's memory.
func deleteTopic(ctx context.Context, brokers []string, topic string) error {
	return admin(brokers, func(c *kafkago.Client) error {
		res, err := c.DeleteTopics(ctx, &kafkago.DeleteTopicsRequest{Topics: []string{topic}})
		if err == nil {
			err = res.Errors[topic]
		}
		if err != nil {
			return fmt.Errorf("delete topic %s: %w", topic, err)
		}
		return nil
	})
}

// partitionIDs returns the partitions of topic.
func partitionIDs(ctx context.Context, brokers []string, topic string) ([]int, error) {
	var ids []int
	err := admin(brokers, func(c *kafkago.Client) error {
		md, err := c.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
		if err != nil {
			return err
		}
		if len(md.Topics) != 1 || md.Topics[0].Error != nil {
			return fmt.Errorf("metadata of %s: %+v", topic, md.Topics)
		}
		for _, p := range md.Topics[0].Partitions {
			ids = append(ids, p.ID)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	return ids, nil
}

// readTopic reads every partition of topic from offset 0 into a. With
// follow it keeps reading until ctx ends (and returns nil then); without,
// it stops at each partition's high watermark. ready, when not nil, is
// called once every partition has answered a first fetch.
func readTopic(ctx context.Context, brokers []string, topic string, follow bool, a *arrivals, ready func()) error {
	parts, err := partitionIDs(ctx, brokers, topic)
	if err != nil {
		return err
	}
	var pending atomic.Int32
	pending.Store(int32(len(parts)))
	fetched := func() {
		if pending.Add(-1) == 0 && ready != nil {
			ready()
		}
	}
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = readPartition(ctx, brokers, topic, p, follow, a, sync.OnceFunc(fetched))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readPartition is readTopic's loop for one partition. Each partition has
// its own connection: a broker answers one connection's requests in
// order, so a long poll on one partition would delay the others.
func readPartition(ctx context.Context, brokers []string, topic string, partition int, follow bool, a *arrivals, fetched func()) error {
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr}
	var offset int64
	failures := 0
	for {
		res, err := client.Fetch(ctx, &kafkago.FetchRequest{
			Topic: topic, Partition: partition, Offset: offset,
			MinBytes: 1, MaxBytes: fetchMaxBytes, MaxWait: fetchMaxWait,
		})
		at := time.Now()
		if ctx.Err() != nil {
			if follow {
				return nil
			}
			return ctx.Err()
		}
		if err == nil {
			err = res.Error
		}
		if err != nil {
			if failures++; failures > fetchMaxRetries {
				return fmt.Errorf("fetch %s/%d@%d: %w", topic, partition, offset, err)
			}
			wait(ctx, fetchRetryWait)
			continue
		}
		failures = 0
		fetched()
		ids, next, err := eventIDs(res.Records, offset)
		if err != nil {
			return fmt.Errorf("read %s/%d@%d: %w", topic, partition, offset, err)
		}
		a.add(ids, at)
		offset = next
		if !follow && offset >= res.HighWatermark {
			return nil
		}
	}
}

// eventIDs reads the event ids of the records at or after offset and
// returns the offset to fetch next. A record without a valid id gets
// uuid.Nil.
func eventIDs(records kafkago.RecordReader, offset int64) ([]uuid.UUID, int64, error) {
	var ids []uuid.UUID
	for {
		r, err := records.ReadRecord()
		if errors.Is(err, io.EOF) {
			return ids, offset, nil
		}
		if err != nil {
			return nil, offset, err
		}
		if r.Offset < offset { // a compressed batch starts before the request
			continue
		}
		offset = r.Offset + 1
		var id uuid.UUID
		for _, h := range r.Headers {
			if h.Key == outbox.HeaderEventID {
				id, _ = uuid.ParseBytes(h.Value)
			}
		}
		ids = append(ids, id)
	}
}

// wait waits d or until ctx ends.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
