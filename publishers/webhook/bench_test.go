package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// BenchmarkPublish publishes 10,000 messages of 200 bytes over 1,000 keys
// to a loopback receiver that reads each body and answers 204: with the
// sink (unsigned, and signed with two secrets), and with a bare net/http
// client posting the same payloads from DefaultMaxInFlight goroutines over
// a transport with as many idle connections, ignoring keys: the sink's
// ceiling. Compare the msgs/s of the sub-benchmarks.
//
//	go test -run '^$' -bench BenchmarkPublish -benchtime 5x ./publishers/webhook/
func BenchmarkPublish(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	const n, keys = 10000, 1000
	payload := []byte(`{"type":"order.created","data":{"id":"` + strings.Repeat("x", 200-41) + `"}}`)
	if len(payload) != 200 {
		b.Fatalf("payload of %d bytes", len(payload))
	}
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = msg("orders.created", fmt.Sprintf("customer-%d", i%keys), "")
		msgs[i].Payload = payload
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "msgs/s")
	}
	for name, secrets := range map[string][]string{"sink": nil, "sink-signed": {testSecret, testSecretOld}} {
		b.Run(name, func(b *testing.B) {
			p := newPublisher(b, webhook.Config{URL: srv.URL + "/hooks/{topic}", Secrets: secrets})
			for b.Loop() {
				if err := p.Publish(context.Background(), msgs); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
	}
	b.Run("bare-client", func(b *testing.B) {
		tr := &http.Transport{MaxIdleConns: webhook.DefaultMaxInFlight, MaxIdleConnsPerHost: webhook.DefaultMaxInFlight}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		url := srv.URL + "/hooks/orders.created"
		for b.Loop() {
			var next atomic.Int64
			var wg sync.WaitGroup
			for range webhook.DefaultMaxInFlight {
				wg.Go(func() {
					for next.Add(1) <= n {
						req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(payload))
						req.Header.Set("Content-Type", "application/json")
						resp, err := client.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusNoContent {
							b.Errorf("status %s", resp.Status)
						}
					}
				})
			}
			wg.Wait()
		}
		report(b)
	})
}
