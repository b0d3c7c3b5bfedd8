package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// webhookCeiling posts the requests the sink does (same body, same
// headers but the signature, which the relays do not set either) to the
// reader's receiver, with a net/http client holding
// webhook.DefaultMaxInFlight requests open at once, as the sink does.
type webhookCeiling struct {
	url    string // the receiver's, with {topic}
	client *http.Client
	slots  chan struct{} // requests in flight
}

func openWebhookCeiling(_ context.Context, url string) (ceiling, error) {
	return &webhookCeiling{
		url: url,
		client: &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        webhook.DefaultMaxInFlight,
			MaxIdleConnsPerHost: webhook.DefaultMaxInFlight,
			IdleConnTimeout:     90 * time.Second,
		}, Timeout: webhook.DefaultTimeout},
		slots: make(chan struct{}, webhook.DefaultMaxInFlight),
	}, nil
}

func (w *webhookCeiling) publish(ctx context.Context, topic string, msgs []outbox.Message) error {
	url := strings.ReplaceAll(w.url, webhook.TopicPlaceholder, topic)
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i := range msgs {
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-w.slots }()
			errs[i] = w.post(ctx, url, &msgs[i])
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// post sends one message as the sink does and wants 2xx.
func (w *webhookCeiling) post(ctx context.Context, url string, m *outbox.Message) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(m.Payload))
	if err != nil {
		return err
	}
	id := m.ID.String()
	req.Header[webhook.HeaderWebhookID] = []string{id}
	req.Header[webhook.HeaderEventID] = []string{id}
	req.Header["Idempotency-Key"] = []string{`"` + id + `"`}
	req.Header[webhook.HeaderWebhookTimestamp] = []string{fmt.Sprint(time.Now().Unix())}
	req.Header["Content-Type"] = []string{webhook.DefaultContentType}
	req.Header[webhook.HeaderTopic] = []string{m.Topic}
	req.Header[webhook.HeaderKey] = []string{string(m.Key)}
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook: %s answered %s", url, resp.Status)
	}
	return nil
}

func (w *webhookCeiling) close() error {
	w.client.CloseIdleConnections()
	return nil
}
