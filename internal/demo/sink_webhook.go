package demo

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// Webhook is the demo's webhook receiver: an HTTP server on loopback that
// records every POST to /demo/<topic> and answers 204 No Content. Other
// paths get 404, which the sink takes as a permanent failure.
type Webhook struct {
	ln  net.Listener
	srv *http.Server

	mu    sync.Mutex // serializes got: one key's requests come one by one
	topic string
	got   func(Received)
}

// StartWebhook starts the receiver on a free port of 127.0.0.1.
func StartWebhook() (*Webhook, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	w := &Webhook{ln: ln}
	w.srv = &http.Server{Handler: http.HandlerFunc(w.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = w.srv.Serve(ln) }() // returns at Close
	return w, nil
}

// URL is the webhook sink's URL template for the receiver:
// http://127.0.0.1:<port>/demo/{topic}.
func (w *Webhook) URL() string {
	return "http://" + w.ln.Addr().String() + "/demo/" + webhook.TopicPlaceholder
}

// Open starts recording the POSTs for topic.
func (w *Webhook) Open(_ context.Context, topic string, got func(Received)) (string, error) {
	w.mu.Lock()
	w.topic, w.got = topic, got
	w.mu.Unlock()
	return fmt.Sprintf("webhook:  receiver on http://%s/demo/%s", w.ln.Addr(), topic), nil
}

func (w *Webhook) serve(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(rw, "cannot read the body", http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.got == nil || r.Method != http.MethodPost || r.URL.Path != "/demo/"+w.topic {
		http.NotFound(rw, r)
		return
	}
	key := r.Header.Get(webhook.HeaderKey)
	if b64 := r.Header.Get(webhook.HeaderKeyBase64); b64 != "" {
		raw, _ := base64.StdEncoding.DecodeString(b64) // a bad one arrives as a wrong key: corrupted
		key = string(raw)
	}
	w.got(Received{EventID: r.Header.Get(outbox.HeaderEventID), Key: key, Payload: string(body)})
	rw.WriteHeader(http.StatusNoContent)
}

// Close stops the receiver.
func (w *Webhook) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("webhook receiver: %w", err)
	}
	return nil
}
