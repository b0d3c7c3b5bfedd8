package sinks

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
	"github.com/outboxrelay/outboxrelay/relay"
)

// webhookSink POSTs each event to an HTTP endpoint (publishers/webhook);
// its flags are --webhook-*.
func init() { register(webhookSink) }

var webhookSink = Sink{
	Name:        "webhook",
	CloudEvents: cloudevents.HTTP,
	About:       "HTTP POST per event, Standard Webhooks signatures",
	Flags: func(f Flags) Settings {
		w := &webhookFlags{}
		w.register(f)
		return w
	},
}

// webhookFlags are the webhook sink's flags.
type webhookFlags struct {
	cfg webhook.Config // built by check

	url, secrets, contentType, probeURL string
	timeout                             time.Duration
	maxInFlight                         int
	headers                             []webhookHeader
	tlsCA, tlsCert, tlsKey              string
	tlsInsecure                         bool
}

// webhookHeader is one --webhook-header.
type webhookHeader struct{ name, value string }

func (w *webhookFlags) register(f Flags) {
	f.String(&w.url, "webhook-url", "", "URL every event is POSTed to; {topic} in its path or query is replaced by the event's topic, e.g. https://hooks.example.com/events/{topic}")
	f.String(&w.secrets, "webhook-secret", "", "comma-separated Standard Webhooks signing secrets, whsec_<base64 key>; each adds a signature, for rotation (prefer the environment variable; never logged)")
	f.Duration(&w.timeout, "webhook-timeout", webhook.DefaultTimeout, "bound on one request; an endpoint that has not answered by then fails the event transiently")
	f.Int(&w.maxInFlight, "webhook-max-in-flight", webhook.DefaultMaxInFlight, "most requests open at once; one key has at most one")
	f.String(&w.contentType, "webhook-content-type", webhook.DefaultContentType, "Content-Type of every request")
	f.Func("webhook-header", "header", `header added to every request, "Name: value"; repeat the flag, or put one per line in the variable (values are never logged)`,
		func(s string) error {
			for line := range strings.SplitSeq(s, "\n") {
				if strings.TrimSpace(line) == "" {
					continue
				}
				name, value, ok := strings.Cut(line, ":")
				if !ok || strings.TrimSpace(name) == "" {
					return errors.New(`each header must be "Name: value"`) // the value may be a credential: not quoted
				}
				w.headers = append(w.headers, webhookHeader{strings.TrimSpace(name), strings.TrimSpace(value)})
			}
			return nil
		},
		func() string {
			names := make([]string, len(w.headers))
			for i, h := range w.headers {
				names[i] = h.name
			}
			return strings.Join(names, ",")
		})
	f.String(&w.probeURL, "webhook-probe-url", "", "URL the relay GETs while the endpoint is down, wanting 2xx; without it the relay asks the --webhook-url host OPTIONS *")
	f.String(&w.tlsCA, "webhook-tls-ca", "", "PEM file of the CA that signed the endpoint's certificate (default: system roots)")
	f.String(&w.tlsCert, "webhook-tls-cert", "", "PEM client certificate for mutual TLS")
	f.String(&w.tlsKey, "webhook-tls-key", "", "PEM private key of --webhook-tls-cert")
	f.Bool(&w.tlsInsecure, "webhook-tls-insecure-skip-verify", false, "do not verify the endpoint's certificate (testing only)")
}

// webhookConfigFlag maps webhook.Config fields to the flags that set them.
var webhookConfigFlag = map[string]string{
	"URL": "webhook-url", "Secrets": "webhook-secret", "Timeout": "webhook-timeout",
	"MaxInFlight": "webhook-max-in-flight", "ContentType": "webhook-content-type",
	"Headers": "webhook-header", "ProbeURL": "webhook-probe-url",
}

// check builds the webhook.Config and reports every problem of the flags,
// naming each flag.
func (w *webhookFlags) Check(relay.Config) error {
	var errs problems
	cfg := webhook.Config{
		URL:         w.url,
		Secrets:     splitList(w.secrets),
		Timeout:     w.timeout,
		MaxInFlight: w.maxInFlight,
		ContentType: w.contentType,
		ProbeURL:    w.probeURL,
	}
	if w.url == "" {
		errs.add(usage("--webhook-url (%s) is required for the webhook sink", EnvName("webhook-url")))
		cfg.URL = "http://localhost/" + webhook.TopicPlaceholder // reported: check the rest
	}
	if w.timeout <= 0 {
		errs.add(usage("invalid value for --webhook-timeout (%s): %v is not positive", EnvName("webhook-timeout"), w.timeout))
		cfg.Timeout = 0
	}
	if w.maxInFlight <= 0 {
		errs.add(usage("invalid value for --webhook-max-in-flight (%s): %d is less than 1", EnvName("webhook-max-in-flight"), w.maxInFlight))
		cfg.MaxInFlight = 0
	}
	if len(w.headers) > 0 {
		cfg.Headers = make(map[string]string, len(w.headers))
		for _, h := range w.headers {
			if _, dup := cfg.Headers[h.name]; dup {
				errs.add(usage("invalid value for --webhook-header (%s): %s is given twice", EnvName("webhook-header"), h.name))
			}
			cfg.Headers[h.name] = h.value
		}
	}
	if w.tlsCA != "" || w.tlsCert != "" || w.tlsKey != "" || w.tlsInsecure {
		tlsCfg, err := webhook.LoadTLS(w.tlsCA, w.tlsCert, w.tlsKey, w.tlsInsecure)
		if err != nil {
			errs.add(usage("invalid TLS files (--webhook-tls-ca, --webhook-tls-cert, --webhook-tls-key): %v", err))
		}
		cfg.TLS = tlsCfg
	}
	p, err := webhook.New(cfg)
	if err == nil {
		_ = p.Close() // it has not connected
	}
	for _, e := range joined(err) {
		errs.add(webhookUsage(e))
	}
	w.cfg = cfg
	return errs.err()
}

// open returns the webhook publisher and logs its configuration (secrets
// and header values redacted).
func (w *webhookFlags) Open(_ relay.Config, logger *slog.Logger, _ io.Writer) (publishers.Publisher, error) {
	p, err := webhook.New(w.cfg)
	if err != nil {
		return nil, webhookUsage(err)
	}
	logger.Info("webhook sink", "config", p.Config())
	return p, nil
}

// webhookUsage turns an error of webhook.New into a usage error naming the
// flag.
func webhookUsage(err error) error {
	var ce *webhook.ConfigError
	if errors.As(err, &ce) && webhookConfigFlag[ce.Field] != "" {
		name := webhookConfigFlag[ce.Field]
		return invalid(name, ce.Reason)
	}
	return usage("invalid webhook configuration: %v", err)
}

// webhookReader is a webhook receiver: an HTTP server on loopback that
// takes POST /hooks/<topic> for the topics prepared and answers 204 No
// Content once it read the body; other paths get 404, which the sink takes
// as a permanent failure. What a topic receives waits for its Read.
type webhookReader struct {
	ln     net.Listener
	srv    *http.Server
	served chan struct{}

	mu     sync.Mutex // serializes got: one key's requests come one by one
	topics map[string]*webhookTopic
}

// webhookTopic is what one prepared topic received and not yet read, or
// the function of the Read that follows it.
type webhookTopic struct {
	held []Record
	got  func(Record)
	n    int64 // requests taken
}

// webhookPath is where the receiver takes a topic's events.
const webhookPath = "/hooks/"

// Reader starts a receiver on a free port of 127.0.0.1 and points
// --webhook-url at it; a --webhook-url given is refused, as the receiver
// could not read what reaches another.
func (w *webhookFlags) Reader() (Reader, error) {
	if w.url != "" {
		return nil, usage("--sink webhook reads back from a receiver of its own: leave --webhook-url (%s) unset", EnvName("webhook-url"))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	r := &webhookReader{ln: ln, served: make(chan struct{}), topics: map[string]*webhookTopic{}}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(r.served)
		_ = r.srv.Serve(ln) // until Close
	}()
	w.url = "http://" + ln.Addr().String() + webhookPath + webhook.TopicPlaceholder
	return r, nil
}

func (r *webhookReader) Prepare(_ context.Context, topic string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.topics[topic] = &webhookTopic{}
	return fmt.Sprintf("webhook:  receiver on http://%s%s%s", r.ln.Addr(), webhookPath, topic), nil
}

func (r *webhookReader) serve(rw http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(rw, "cannot read the body", http.StatusBadRequest)
		return
	}
	topic, ok := strings.CutPrefix(req.URL.Path, webhookPath)
	key := req.Header.Get(webhook.HeaderKey)
	if b64 := req.Header.Get(webhook.HeaderKeyBase64); b64 != "" {
		raw, _ := base64.StdEncoding.DecodeString(b64) // a bad one arrives as a wrong key
		key = string(raw)
	}
	rec := Record{EventID: req.Header.Get(outbox.HeaderEventID), Key: key, Payload: string(body), Time: time.Now()}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.topics[topic]
	if req.Method != http.MethodPost || !ok || t == nil {
		http.NotFound(rw, req)
		return
	}
	rec.Offset, t.n = t.n, t.n+1
	if t.got != nil {
		t.got(rec)
	} else {
		t.held = append(t.held, rec)
	}
	rw.WriteHeader(http.StatusNoContent)
}

// Read hands over what the receiver took for topic; with follow, it hands
// the requests to got as they come, until ctx ends.
func (r *webhookReader) Read(ctx context.Context, topic string, follow bool, got func(Record), ready func()) error {
	r.mu.Lock()
	t := r.topics[topic]
	if t == nil {
		r.mu.Unlock()
		return fmt.Errorf("webhook receiver: topic %s was not prepared", topic)
	}
	for _, rec := range t.held {
		got(rec)
	}
	t.held = nil
	if follow {
		t.got = got
	}
	r.mu.Unlock()
	if ready != nil {
		ready()
	}
	if follow {
		<-ctx.Done()
		r.mu.Lock()
		t.got = nil
		r.mu.Unlock()
	}
	return nil
}

func (r *webhookReader) Remove(_ context.Context, topic string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.topics, topic)
	return nil
}

// Close stops the receiver.
func (r *webhookReader) Close() error {
	err := r.srv.Close()
	<-r.served
	return err
}
