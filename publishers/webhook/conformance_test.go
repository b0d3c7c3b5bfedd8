package webhook_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// Two signing secrets, as during a rotation: the receiver verifies the
// signature of each on every request.
const (
	testSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	testSecretOld = "whsec_c2Vjb25kLXRlc3Qta2V5LW9mLTMyLWJ5dGVzLWxvbmch"
)

// TestConformance runs the sink conformance suite against an HTTP receiver
// on loopback TCP, every connection through a fault proxy. The receiver
// verifies both signatures of every request with the independent verifier.
func TestConformance(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, withProxy(), withSecrets(testSecret, testSecretOld))
	publisherstest.Run(t, publisherstest.Harness{
		Name: "webhook",
		// A 2xx answer is the receiver's acknowledgement: it stored the
		// message before answering. The sink enforces no size limit of
		// its own (a receiver's 413 is permanent).
		Features: publisherstest.Features{
			DurableAcks:      true,
			KeyOrder:         true,
			PerMessageErrors: true,
			Prober:           true,
			Outage:           true,
			Stall:            true,
		},
		New: func(t *testing.T) publishers.Publisher {
			p, err := webhook.New(webhook.Config{URL: r.URL(), Secrets: []string{testSecret, testSecretOld}})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Topic:          func(*testing.T) string { return topicName("conformance") },
		RejectingTopic: func(*testing.T) string { return topicName("gone-conformance") },
		Read:           r.records,
		Cut:            func() { r.proxy.Cut() },
		Stall:          func() { r.proxy.Stall() },
		Heal:           func() { r.proxy.Heal() },
	})
}
