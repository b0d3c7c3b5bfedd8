package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
)

// Backoff between attempts of one produce request, as kafka-go's Writer
// does it.
const (
	produceBackoffMin = 100 * time.Millisecond
	produceBackoffMax = time.Second
)

// produce sends batch, messages of one topic in the order given, to their
// partitions and returns one error per message (nil when acknowledged), or
// the error of the call as a whole (and errs nil) when nothing was sent:
// the topic's partitions could not be looked up.
//
// Each partition's messages go in produce requests of at most BatchSize
// messages and MaxMessageBytes bytes, one after the other; the partitions
// are written side by side. A request that failed for a reason other than
// its content is tried again, up to MaxAttempts times. When one fails for
// good, the partition's later messages are not sent and get its error, so
// that none of them overtakes it.
//
// Every request is made under ctx, and produce returns only once none is in
// flight: when ctx ends it returns at once, and nothing more is sent for
// these messages. A request already written to a broker by then may still
// be appended; its outcome is unknown.
func (p *Publisher) produce(ctx context.Context, topic string, batch []kafkago.Message) (errs []error, whole error) {
	n, err := p.partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	byPartition := make(map[int][]int) // message indexes, in order
	var order []int                    // partitions in first-seen order
	for i := range batch {
		part := p.balancer.Balance(batch[i], all...)
		if _, seen := byPartition[part]; !seen {
			order = append(order, part)
		}
		byPartition[part] = append(byPartition[part], i)
	}
	errs = make([]error, len(batch))
	client := &kafkago.Client{Addr: kafkago.TCP(p.cfg.Brokers...), Transport: p.transport, Timeout: p.cfg.WriteTimeout}
	if len(order) == 1 {
		p.producePartition(ctx, client, topic, order[0], batch, byPartition[order[0]], errs)
		return errs, nil
	}
	// Each partition's goroutine writes only its own messages' errors.
	var wg sync.WaitGroup
	for _, part := range order {
		wg.Go(func() { p.producePartition(ctx, client, topic, part, batch, byPartition[part], errs) })
	}
	wg.Wait()
	return errs, nil
}

// producePartition sends the messages batch[i], i in idxs, to one
// partition in order, in requests that respect BatchSize and
// MaxMessageBytes, and sets errs[i].
func (p *Publisher) producePartition(ctx context.Context, client *kafkago.Client, topic string, part int, batch []kafkago.Message, idxs []int, errs []error) {
	for len(idxs) > 0 {
		n, size := 0, 0
		for n < len(idxs) && n < p.cfg.BatchSize {
			s := messageSize(&batch[idxs[n]])
			if n > 0 && size+s > p.cfg.MaxMessageBytes {
				break
			}
			size += s
			n++
		}
		chunk := idxs[:n]
		idxs = idxs[n:]
		failed := p.produceRequest(ctx, client, topic, part, batch, chunk, errs)
		if failed != nil {
			for _, i := range idxs { // not sent: they must not overtake the failed ones
				errs[i] = failed
			}
			return
		}
	}
}

// produceRequest sends one produce request for batch[i], i in idxs, trying
// again after failures that are not the records' own, and sets errs[i]. It
// returns the request's error when it failed for good.
func (p *Publisher) produceRequest(ctx context.Context, client *kafkago.Client, topic string, part int, batch []kafkago.Message, idxs []int, errs []error) error {
	var err error
	for attempt := range p.cfg.MaxAttempts {
		if attempt > 0 && !sleepCtx(ctx, produceBackoff(attempt)) {
			break
		}
		var res *kafkago.ProduceResponse
		res, err = client.Produce(ctx, &kafkago.ProduceRequest{
			Topic:        topic,
			Partition:    part,
			RequiredAcks: kafkago.RequireAll,
			Records:      recordReader(batch, idxs),
		})
		if err == nil && res != nil && res.Error != nil {
			err = res.Error
			if len(res.RecordErrors) > 0 {
				// The broker named the records at fault; it rejected the
				// request whole, so the others carry its error.
				for k, i := range idxs {
					errs[i] = err
					if recErr, ok := res.RecordErrors[k]; ok {
						errs[i] = fmt.Errorf("%w: %v", err, recErr)
					}
				}
				return err
			}
		}
		if err == nil {
			for _, i := range idxs {
				errs[i] = nil
			}
			return nil
		}
		if ctx.Err() != nil || !retriable(err) {
			break
		}
		if l := p.cfg.Logger; l != nil {
			l.Warn("kafka: produce request failed; retrying", "topic", topic, "partition", part, "attempt", attempt+1, "error", err)
		}
	}
	for _, i := range idxs {
		errs[i] = err
	}
	return err
}

// recordReader returns the records of batch[i], i in idxs. A request
// consumes its keys and values as it encodes them: every attempt needs a
// reader of its own.
func recordReader(batch []kafkago.Message, idxs []int) kafkago.RecordReader {
	records := make([]kafkago.Record, len(idxs))
	for k, i := range idxs {
		m := &batch[i]
		records[k] = kafkago.Record{Time: m.Time, Headers: m.Headers}
		if m.Key != nil {
			records[k].Key = kafkago.NewBytes(m.Key)
		}
		if m.Value != nil {
			records[k].Value = kafkago.NewBytes(m.Value)
		}
	}
	return kafkago.NewRecordReader(records...)
}

// retriable reports whether a failed produce request may succeed when sent
// again: anything but a rejection of its records or topic, or the
// caller's cancellation.
func retriable(err error) bool {
	var code kafkago.Error
	if errors.As(err, &code) && (recordCodes[code] || topicCodes[code]) {
		return false
	}
	return !errors.Is(err, context.Canceled)
}

// produceBackoff is the wait before the given attempt (1 for the first
// retry): doubling from produceBackoffMin up to produceBackoffMax.
func produceBackoff(attempt int) time.Duration {
	d := produceBackoffMin << min(attempt-1, 10)
	return min(d, produceBackoffMax)
}

// sleepCtx waits d, or less when ctx ends first; it reports whether it
// waited the whole d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// partitions returns the number of partitions of topic. The transport
// answers from its metadata cache (refreshed every 6 s) when it can; a
// missing topic is a kafkago.UnknownTopicOrPartition error.
func (p *Publisher) partitions(ctx context.Context, topic string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.WriteTimeout)
	defer cancel()
	res, err := p.transport.RoundTrip(ctx, kafkago.TCP(p.cfg.Brokers...), &metadataAPI.Request{
		TopicNames:             []string{topic},
		AllowAutoTopicCreation: p.cfg.AllowAutoTopicCreation,
	})
	if err != nil {
		return 0, err
	}
	for _, t := range res.(*metadataAPI.Response).Topics {
		if t.Name != topic {
			continue
		}
		if t.ErrorCode != 0 {
			return 0, kafkago.Error(t.ErrorCode)
		}
		if len(t.Partitions) == 0 {
			return 0, kafkago.LeaderNotAvailable
		}
		return len(t.Partitions), nil
	}
	return 0, kafkago.UnknownTopicOrPartition
}
