package sinks

import (
	"context"
	"fmt"
	"sync"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/outboxrelay/outboxrelay/outbox"
	pubsubsink "github.com/outboxrelay/outboxrelay/publishers/pubsub"
)

// pubsubReader reads a topic back through an ordered subscription of its
// own, pulled and acknowledged with the Google client. What it pulled is
// kept, so that every Read hands the same messages at the same offsets.
type pubsubReader struct {
	client            *pubsub.Client
	project, endpoint string
	stop              func() // the embedded fake's; nil with an endpoint

	mu    sync.Mutex
	log   map[string][]Record    // by topic, in the order pulled
	pulls map[string]*sync.Mutex // by topic: one puller at a time
}

func (r *pubsubReader) names(topic string) (topicName, subName string) {
	return "projects/" + r.project + "/topics/" + topic, "projects/" + r.project + "/subscriptions/" + topic + "-outboxrelay-reader"
}

// Prepare creates the topic, unless it exists, and a fresh subscription
// with message ordering, which gets what is published from now on.
func (r *pubsubReader) Prepare(ctx context.Context, topic string) (string, error) {
	topicName, subName := r.names(topic)
	if _, err := r.client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topicName}); err != nil && status.Code(err) != codes.AlreadyExists {
		return "", fmt.Errorf("pubsub: create topic %s at %s: %w", topicName, r.where(), err)
	}
	err := r.client.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: subName})
	if err != nil && status.Code(err) != codes.NotFound {
		return "", fmt.Errorf("pubsub: delete subscription %s: %w", subName, err)
	}
	if _, err := r.client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: subName, Topic: topicName, EnableMessageOrdering: true, AckDeadlineSeconds: 60,
	}); err != nil {
		return "", fmt.Errorf("pubsub: create subscription %s: %w", subName, err)
	}
	r.mu.Lock()
	r.log[topic] = nil
	r.mu.Unlock()
	return fmt.Sprintf("pubsub:   %s, topic %s, ordered subscription %s", r.where(), topicName, subName), nil
}

func (r *pubsubReader) where() string {
	switch {
	case r.stop != nil:
		return "embedded fake (pstest) on " + r.endpoint
	case r.endpoint != "":
		return "emulator " + r.endpoint
	}
	return "Google Cloud"
}

// Read hands what was pulled already, then pulls and acknowledges more;
// without follow it stops at the first empty pull.
func (r *pubsubReader) Read(ctx context.Context, topic string, follow bool, got func(Record), ready func()) error {
	if ready != nil {
		ready() // the subscription holds everything since Prepare
	}
	next := 0
	for {
		r.mu.Lock()
		recs := r.log[topic][next:]
		r.mu.Unlock()
		for _, rec := range recs {
			got(rec)
		}
		next += len(recs)
		n, err := r.pull(ctx, topic, !follow)
		switch {
		case ctx.Err() != nil && follow:
			return nil
		case err != nil:
			return err
		case n == 0 && !follow:
			r.mu.Lock()
			recs := r.log[topic][next:]
			r.mu.Unlock()
			for _, rec := range recs {
				got(rec)
			}
			return nil
		}
	}
}

// pull pulls once, appends what came to the topic's log and acknowledges
// it; it returns how many messages came.
func (r *pubsubReader) pull(ctx context.Context, topic string, immediately bool) (int, error) {
	r.mu.Lock()
	lock := r.pulls[topic]
	if lock == nil {
		lock = &sync.Mutex{}
		r.pulls[topic] = lock
	}
	r.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()
	_, subName := r.names(topic)
	res, err := r.client.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{
		Subscription: subName, MaxMessages: 1000, ReturnImmediately: immediately, //nolint:staticcheck // the fakes honour it
	})
	if err != nil {
		return 0, fmt.Errorf("pubsub: pull %s: %w", subName, err)
	}
	msgs := res.GetReceivedMessages()
	if len(msgs) == 0 {
		return 0, nil
	}
	ids := make([]string, len(msgs))
	r.mu.Lock()
	for i, rm := range msgs {
		m := rm.GetMessage()
		key, _ := pubsubsink.Key(m.GetAttributes())
		r.log[topic] = append(r.log[topic], Record{
			EventID: m.GetAttributes()[outbox.HeaderEventID], Key: string(key), Payload: string(m.GetData()),
			Offset: int64(len(r.log[topic])), Time: m.GetPublishTime().AsTime(),
		})
		ids[i] = rm.GetAckId()
	}
	r.mu.Unlock()
	if err := r.client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: subName, AckIds: ids}); err != nil {
		return 0, fmt.Errorf("pubsub: acknowledge on %s: %w", subName, err)
	}
	return len(msgs), nil
}

// Remove deletes the subscription and the topic.
func (r *pubsubReader) Remove(ctx context.Context, topic string) error {
	topicName, subName := r.names(topic)
	err := r.client.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: subName})
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("pubsub: delete subscription %s: %w", subName, err)
	}
	err = r.client.TopicAdminClient.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: topicName})
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("pubsub: delete topic %s: %w", topicName, err)
	}
	return nil
}

// Close closes the client and stops the embedded fake.
func (r *pubsubReader) Close() error {
	err := r.client.Close()
	if r.stop != nil {
		r.stop()
	}
	return err
}
