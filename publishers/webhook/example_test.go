package webhook_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

func ExamplePublisher_Publish() {
	// A receiver that prints what it gets, and answers 410 Gone for the
	// topic it no longer wants.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/events/legacy.event" {
			w.WriteHeader(http.StatusGone)
			return
		}
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("%s %s key=%s trace=%s signed=%t body=%s\n", r.Method, r.URL.Path,
			r.Header.Get(webhook.HeaderKey), r.Header.Get(webhook.HeaderPrefix+"trace-id"),
			r.Header.Get(webhook.HeaderWebhookSignature) != "", body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	p, err := webhook.New(webhook.Config{
		URL:     srv.URL + "/events/{topic}",
		Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs := []outbox.Message{
		{ID: uuid.New(), Topic: "orders.created", Key: []byte("customer-42"), Payload: []byte(`{"order":1}`),
			Headers: map[string]string{"trace-id": "00-4bf9-01"}},
		{ID: uuid.New(), Topic: "legacy.event", Key: []byte("customer-42"), Payload: []byte(`{"order":2}`)},
	}
	for i, err := range publishers.PerMessage(p.Publish(ctx, msgs), len(msgs)) {
		switch {
		case err == nil:
			fmt.Printf("message %d: delivered\n", i)
		case publishers.IsPermanent(err):
			fmt.Printf("message %d: permanent failure\n", i)
		default:
			fmt.Printf("message %d: retry later\n", i)
		}
	}
	// Output:
	// POST /events/orders.created key=customer-42 trace=00-4bf9-01 signed=true body={"order":1}
	// message 0: delivered
	// message 1: permanent failure
}
