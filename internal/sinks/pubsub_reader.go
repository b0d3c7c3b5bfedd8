package sinks

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc"
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

	mu       sync.Mutex
	log      map[string][]Record    // by topic, in the order pulled
	pulls    map[string]*sync.Mutex // by topic: one puller at a time
	lastFail time.Time              // of a pull or acknowledgement
}

// pubsubAckDeadline is the reader subscription's: a message pulled but
// not acknowledged (its answer or acknowledgement lost to a fault) comes
// back after it, and holds back its key's later messages until then.
const pubsubAckDeadline = 10 * time.Second

// pubsubCall bounds one pull or acknowledgement; it waits for a
// connection that is not ready yet rather than fail at once.
var pubsubCall = []gax.CallOption{gax.WithGRPCOptions(grpc.WaitForReady(true))}

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
		Name: subName, Topic: topicName, EnableMessageOrdering: true, AckDeadlineSeconds: int32(pubsubAckDeadline / time.Second),
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
	case os.Getenv(pubsubsink.EmulatorHostEnv) != "":
		return "emulator " + os.Getenv(pubsubsink.EmulatorHostEnv)
	}
	return "Google Cloud"
}

// Read hands what was pulled already, then pulls and acknowledges more;
// without follow it stops at the first empty pull, or, after a failed
// pull or acknowledgement, once the messages it may have left outstanding
// came back.
func (r *pubsubReader) Read(ctx context.Context, topic string, follow bool, got func(Record), ready func()) error {
	if ready != nil {
		ready() // the subscription holds everything since Prepare
	}
	next := 0
	deliver := func() {
		r.mu.Lock()
		recs := r.log[topic][next:]
		r.mu.Unlock()
		for _, rec := range recs {
			got(rec)
		}
		next += len(recs)
	}
	for {
		deliver()
		if ctx.Err() != nil {
			if follow {
				return nil
			}
			return ctx.Err()
		}
		r.mu.Lock()
		settling := time.Since(r.lastFail) < pubsubAckDeadline+2*time.Second
		r.mu.Unlock()
		n, err := r.pull(ctx, topic, !follow && !settling)
		switch {
		case err != nil && !follow:
			return err
		case err != nil: // following: try again shortly
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		case n == 0 && !follow && !settling:
			deliver()
			return nil
		}
	}
}

// pull pulls once, appends what came to the topic's log and acknowledges
// it; it returns how many messages came. Neither call is cut short by
// ctx: a pull answered but cancelled would leave its messages outstanding
// until the ack deadline.
func (r *pubsubReader) pull(ctx context.Context, topic string, immediately bool) (n int, err error) {
	r.mu.Lock()
	lock := r.pulls[topic]
	if lock == nil {
		lock = &sync.Mutex{}
		r.pulls[topic] = lock
	}
	r.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()
	defer func() {
		if err != nil {
			r.mu.Lock()
			r.lastFail = time.Now()
			r.mu.Unlock()
		}
	}()
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, subName := r.names(topic)
	res, err := r.client.SubscriptionAdminClient.Pull(callCtx, &pubsubpb.PullRequest{
		Subscription: subName, MaxMessages: 1000, ReturnImmediately: immediately, //nolint:staticcheck // the fakes honour it
	}, pubsubCall...)
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
	if err := r.client.SubscriptionAdminClient.Acknowledge(callCtx, &pubsubpb.AcknowledgeRequest{Subscription: subName, AckIds: ids}, pubsubCall...); err != nil {
		return len(msgs), fmt.Errorf("pubsub: acknowledge on %s: %w", subName, err)
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
