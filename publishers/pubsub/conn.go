package pubsubsink

import (
	"context"
	"fmt"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// delayThreshold is how long the client gathers a key's messages into one
// request: short, so that a message is not sent long after Publish's
// context ended.
const delayThreshold = time.Millisecond

// conn is one client, its gRPC connections and its publishers, one per
// topic. A conn that met an unreachable service is dropped, and the next
// call makes a new one: gRPC would otherwise fail calls at once until its
// own reconnection backoff (up to two minutes) ends.
type conn struct {
	client  *pubsub.Client
	timeout time.Duration

	mu     sync.Mutex
	topics map[string]*pubsub.Publisher
}

// dial makes a client of cfg; it does not connect yet.
func dial(cfg Config) (*conn, error) {
	// No retry by the client: a request it retried in the background could
	// be sent after Publish returned. The relay retries.
	never := gax.WithRetry(func() gax.Retryer { return noRetry{} })
	conf := &pubsub.ClientConfig{TopicAdminCallOptions: &vkit.TopicAdminCallOptions{
		Publish: []gax.CallOption{never}, ListTopics: []gax.CallOption{never},
	}}
	var opts []option.ClientOption
	if cfg.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(cfg.Endpoint), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			option.WithTelemetryDisabled())
	}
	client, err := pubsub.NewClientWithConfig(context.Background(), cfg.Project, conf, opts...)
	if err != nil {
		return nil, fmt.Errorf("pubsub: client: %w", err)
	}
	return &conn{client: client, timeout: cfg.PublishTimeout, topics: map[string]*pubsub.Publisher{}}, nil
}

// noRetry is a gax.Retryer that never retries.
type noRetry struct{}

func (noRetry) Retry(error) (time.Duration, bool) { return 0, false }

// topic returns the client publisher of topic, made at first use.
func (c *conn) topic(topic string) *pubsub.Publisher {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.topics[topic]
	if t == nil {
		t = c.client.Publisher(topic)
		t.EnableMessageOrdering = true
		t.PublishSettings.DelayThreshold = delayThreshold
		t.PublishSettings.Timeout = c.timeout
		c.topics[topic] = t
	}
	return t
}

// resume resumes key on topic's publisher.
func (c *conn) resume(topic, key string) {
	c.mu.Lock()
	t := c.topics[topic]
	c.mu.Unlock()
	if t != nil {
		t.ResumePublish(key)
	}
}

// close closes the client's connections, which fails the requests in
// flight at once, then stops its publishers.
func (c *conn) close() {
	_ = c.client.Close()
	c.mu.Lock()
	topics := c.topics
	c.topics = map[string]*pubsub.Publisher{}
	c.mu.Unlock()
	for _, t := range topics {
		t.Stop()
	}
}

// unreachable reports whether err says the service could not be reached.
func unreachable(err error) bool {
	return status.Code(err) == codes.Unavailable
}
