package sqssns

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// Publisher publishes to SQS queues with SendMessageBatch. It is safe for
// concurrent use.
type Publisher struct {
	cfg    Config
	c      *sqs.Client
	urls   sync.Map // queue name -> URL
	client *http.Client
	once   sync.Once
}

// Config returns the configuration in use, defaults filled.
func (p *Publisher) Config() Config { return p.cfg }

// Publish sends msgs, each topic's in batches of at most 10 messages and
// MaxMessageBytes, in their order. It returns nil when every message was
// acknowledged, a publishers.Errors otherwise (see the package
// documentation for the classification).
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	results := make([]error, len(msgs))
	var down error // once the service is unreachable, the rest is not sent
	for _, idx := range byTopic(msgs) {
		dest, fifo, err := p.resolve(ctx, msgs[idx[0]].Topic)
		if err != nil {
			setAll(results, idx, classify(err))
			continue
		}
		var batch []entry
		var at []int
		flush := func() {
			if len(batch) == 0 {
				return
			}
			switch {
			case down != nil:
				setAll(results, at, down)
			case ctx.Err() != nil:
				setAll(results, at, publishers.Unavailable(ctx.Err()))
			default:
				res, err := p.send(ctx, dest, batch)
				if err != nil {
					err = classify(err)
					if errors.Is(err, publishers.ErrUnavailable) {
						down = err
					}
					setAll(results, at, err)
				} else {
					for i, r := range res {
						results[at[i]] = r
					}
				}
			}
			batch, at = batch[:0], at[:0]
		}
		size := 0
		for _, i := range idx {
			e, err := toEntry(&msgs[i], fifo, p.cfg.MaxMessageBytes)
			if err != nil {
				results[i] = publishers.Permanent(err)
				continue
			}
			if len(batch) == 10 || size+e.size > p.cfg.MaxMessageBytes {
				flush()
				size = 0
			}
			batch, at, size = append(batch, e), append(at, i), size+e.size
		}
		flush()
	}
	return publishers.Summarize(results)
}

// byTopic returns the indexes of msgs grouped by topic, each group in
// order, the groups in the order of their first message.
func byTopic(msgs []outbox.Message) [][]int {
	var groups [][]int
	pos := map[string]int{}
	for i := range msgs {
		g, ok := pos[msgs[i].Topic]
		if !ok {
			g = len(groups)
			pos[msgs[i].Topic] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// setAll sets results[i] to err for every i of idx.
func setAll(results []error, idx []int, err error) {
	for _, i := range idx {
		results[i] = err
	}
}

// Probe makes one cheap request (ListQueues or ListTopics, one result).
func (p *Publisher) Probe(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return classify(p.probe(ctx))
}

// Close closes idle connections; it is idempotent and does not block.
func (p *Publisher) Close() error {
	p.once.Do(p.client.CloseIdleConnections)
	return nil
}
