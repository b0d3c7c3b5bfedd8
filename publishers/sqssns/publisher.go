package sqssns

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// service is what a destination service answers: SQS now, SNS to follow.
type service interface {
	// resolve returns the destination of an outbox topic (a queue URL, a
	// topic ARN) and whether it is FIFO.
	resolve(ctx context.Context, topic string) (dest string, fifo bool, err error)
	// send sends one batch (at most 10 entries) and returns one result
	// per entry, or an error for the whole batch.
	send(ctx context.Context, dest string, batch []entry) ([]error, error)
	// probe makes one cheap request.
	probe(ctx context.Context) error
}

// Publisher publishes to SQS queues or SNS topics with SendMessageBatch or
// PublishBatch. It is safe for concurrent use.
type Publisher struct {
	cfg    Config
	svc    service
	client *http.Client
	once   sync.Once
}

// newPublisher returns a Publisher of svc; ac holds its HTTP client.
func newPublisher(cfg Config, svc service, ac aws.Config) *Publisher {
	return &Publisher{cfg: cfg, svc: svc, client: ac.HTTPClient.(*http.Client)}
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
		dest, fifo, err := p.svc.resolve(ctx, msgs[idx[0]].Topic)
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
				res, err := p.svc.send(ctx, dest, batch)
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
	return classify(p.svc.probe(ctx))
}

// Close closes idle connections; it is idempotent and does not block.
func (p *Publisher) Close() error {
	p.once.Do(p.client.CloseIdleConnections)
	return nil
}
