package webhook_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// Without ProbeURL, Probe asks the host "OPTIONS *" and takes any answer
// but 502, 503 and 504 as the receiver answering.
func TestProbeAsksOptionsStar(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]string{
		200: "acknowledged", 404: "acknowledged", 405: "acknowledged", 501: "acknowledged",
		502: "unavailable", 503: "unavailable", 504: "unavailable",
	} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			lines := make(chan string, 1)
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				br := bufio.NewReader(conn)
				line, _ := br.ReadString('\n')
				lines <- strings.TrimSpace(line)
				for { // the rest of the head
					l, err := br.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", code, http.StatusText(code))
			}()
			p := newPublisher(t, webhook.Config{URL: "http://" + ln.Addr().String() + "/hooks/{topic}"})
			err = p.Probe(t.Context())
			if got := publishers.ClassOf(err).String(); got != want {
				t.Errorf("Probe answered %d: %s (%v), want %s", code, got, err, want)
			}
			if line := <-lines; line != "OPTIONS * HTTP/1.1" {
				t.Errorf("Probe sent %q, want OPTIONS * HTTP/1.1", line)
			}
		})
	}
}

// With ProbeURL, Probe GETs it, with the static headers, and wants 2xx; a
// canceled Probe fails.
func TestProbeURL(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodGet || r.URL.Path != "/health":
			w.WriteHeader(http.StatusTeapot)
		case r.Header.Get("Authorization") != "Bearer t":
			w.WriteHeader(http.StatusUnauthorized)
		case !healthy.Load():
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	p := newPublisher(t, webhook.Config{URL: srv.URL + "/hooks/{topic}", ProbeURL: srv.URL + "/health", Headers: map[string]string{"Authorization": "Bearer t"}})
	if err := p.Probe(t.Context()); err != nil {
		t.Errorf("healthy: %v", err)
	}
	healthy.Store(false)
	if err := p.Probe(t.Context()); publishers.ClassOf(err).String() != "unavailable" || !strings.Contains(err.Error(), "500") {
		t.Errorf("unhealthy: %s (%v), want unavailable naming the 500", publishers.ClassOf(err).String(), err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Probe(ctx); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("canceled: %s (%v), want unavailable", publishers.ClassOf(err).String(), err)
	}
}
