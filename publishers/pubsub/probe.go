package pubsubsink

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/outboxrelay/outboxrelay/publishers"
)

// Probe reports whether the service answers, without publishing: it lists
// one topic of the project. An answer that refuses the listing (permission
// denied, no such project) still is an answer: nil. It returns an
// Unavailable error when the service cannot be reached or ctx ends first,
// and ErrClosed after Close.
func (p *Publisher) Probe(ctx context.Context) error {
	c, err := p.conn()
	if err != nil {
		return classify(fmt.Errorf("pubsub: probe: %w", err))
	}
	if err := ctx.Err(); err != nil {
		return publishers.Unavailable(fmt.Errorf("pubsub: probe: %w", err))
	}
	it := c.client.TopicAdminClient.ListTopics(ctx, &pubsubpb.ListTopicsRequest{Project: "projects/" + p.cfg.Project, PageSize: 1})
	_, err = it.Next()
	if unreachable(err) {
		p.drop(c)
	}
	switch code := status.Code(err); {
	case err == nil, errors.Is(err, iterator.Done):
		return nil
	case ctx.Err() != nil, code == codes.Unavailable, code == codes.DeadlineExceeded, code == codes.Canceled, code == codes.Unknown:
		return publishers.Unavailable(fmt.Errorf("pubsub: probe: list topics: %w", err))
	}
	return nil
}
