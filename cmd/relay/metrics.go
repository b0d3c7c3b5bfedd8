package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
	"github.com/outboxrelay/outboxrelay/relay/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// --metrics-addr ADDR serves, on one listener:
//
//	/metrics  Prometheus metrics (relay/metrics, the Go and process
//	          collectors, outbox_build_info)
//	/healthz  liveness: 200 while the relay's claim loops are alive
//	          (relay.Relay.Liveness); 503 with the reason when one is stuck
//	          or Run has returned. A database or sink outage never fails it.
//	/readyz   readiness: 200 when the database answers, the table's schema
//	          is the one this binary needs, and the relay is not paused by
//	          a sink outage; 503 naming each check that failed otherwise.
//	          The database checks run one at a time and their answer is
//	          reused for readyCacheFor (1s).
//
// The backlog gauges are read in the background every
// --metrics-backlog-interval, never per scrape (relay.Relay.Backlog).

// metricsFlags are relay run's flags for metrics and health.
type metricsFlags struct {
	addr            string
	backlogInterval time.Duration
	backlogLimit    int
	maxTopics       int
}

// Defaults of the metrics flags.
const (
	defaultBacklogInterval = metrics.DefaultBacklogInterval
	defaultBacklogLimit    = metrics.DefaultBacklogLimit
	defaultMaxTopics       = metrics.DefaultMaxTopics
)

func (m *metricsFlags) register(f *flags) {
	f.String(&m.addr, "metrics-addr", "", "serve Prometheus metrics on /metrics and the health checks /healthz (liveness) and /readyz (readiness) on this address, e.g. :9090, or 127.0.0.1:0 for a free port (the bound address is logged); off when empty")
	f.Duration(&m.backlogInterval, "metrics-backlog-interval", defaultBacklogInterval, "with --metrics-addr: how often the backlog gauges (rows by state, age of the oldest due row) are read from the table, in the background, never per scrape")
	f.Int(&m.backlogLimit, "metrics-backlog-limit", defaultBacklogLimit, "with --metrics-addr: where each exact count of the backlog gauges stops (a read costs at most about this many index entries per state); a larger backlog shows PostgreSQL's estimate")
	f.Int(&m.maxTopics, "metrics-max-topics", defaultMaxTopics, `with --metrics-addr: how many topics get their own topic label (the first seen); later ones are counted under topic="<other>", and rows rejected for their topic under "<invalid>"`)
}

// check returns the problems of the metrics flags, each naming its flag.
func (m *metricsFlags) check() error {
	var errs problems
	if m.addr != "" {
		if _, _, err := net.SplitHostPort(m.addr); err != nil {
			errs.add(usageError("invalid value for --metrics-addr (%s): %q is not host:port, e.g. :9090 or 127.0.0.1:9090", envName("metrics-addr"), m.addr))
		}
	}
	if m.backlogInterval <= 0 {
		errs.add(usageError("invalid value for --metrics-backlog-interval (%s): must be positive", envName("metrics-backlog-interval")))
	}
	if m.backlogLimit <= 0 {
		errs.add(usageError("invalid value for --metrics-backlog-limit (%s): must be positive", envName("metrics-backlog-limit")))
	}
	if m.maxTopics <= 0 {
		errs.add(usageError("invalid value for --metrics-max-topics (%s): must be positive", envName("metrics-max-topics")))
	}
	return errs.err()
}

// relayMetrics are relay run's metrics: nil when --metrics-addr is empty.
type relayMetrics struct {
	reg *prometheus.Registry
	m   *metrics.Metrics
}

// newRelayMetrics creates the registry and the metrics, or returns nil
// when --metrics-addr is empty.
func (m *metricsFlags) newRelayMetrics() (*relayMetrics, error) {
	if m.addr == "" {
		return nil, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mm, err := metrics.New(reg, metrics.Options{Version: shortVersion(), MaxTopics: m.maxTopics})
	if err != nil {
		return nil, err
	}
	return &relayMetrics{reg: reg, m: mm}, nil
}

// wrap measures a sink under its name; with metrics off it returns pub.
func (rm *relayMetrics) wrap(sink string, pub publishers.Publisher) publishers.Publisher {
	if rm == nil || pub == nil {
		return pub
	}
	return rm.m.Publisher(sink, pub)
}

// observer returns the observer to give the relay: the metrics, and obs
// (the observe file) when it is set.
func (rm *relayMetrics) observer(obs relay.Observer) relay.Observer {
	switch {
	case rm == nil:
		return obs
	case obs == nil:
		return rm.m
	}
	return relay.Observers(rm.m, obs)
}

// serve starts the listener on addr and the backlog reads of each relay
// of fl; stop ends them all.
func (rm *relayMetrics) serve(addr string, mf metricsFlags, fl *fleet, h *health) (bound net.Addr, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(rm.reg, promhttp.HandlerOpts{Registry: rm.reg}))
	mux.HandleFunc("/healthz", h.live)
	mux.HandleFunc("/readyz", h.ready)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed at stop
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, tr := range fl.relays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rm.m.WatchBacklog(ctx, tr.r, metrics.BacklogOptions{Interval: mf.backlogInterval, Limit: int64(mf.backlogLimit), Table: tr.table.String()})
		}()
	}
	return ln.Addr(), func() {
		cancel()
		_ = srv.Close()
		wg.Wait()
	}, nil
}

// shortVersion is the version relay version prints first: "v1.2.3", or
// "(devel)".
func shortVersion() string {
	first, _, _ := strings.Cut(buildVersion(), "\n")
	return strings.TrimPrefix(first, "relay ")
}

// health answers /healthz and /readyz for the relays of one relay run.
type health struct {
	relays  []tableRelay
	ping    func(context.Context) error                     // asks the database for an answer
	check   func(ctx context.Context, t outbox.Table) error // the schema check: migrations.Check
	outage  func() metrics.Outage
	timeout time.Duration    // bounds the database checks of one /readyz
	now     func() time.Time // the clock of the cached checks; time.Now when nil

	mu        sync.Mutex // held while the database checks run: one at a time
	checkedAt time.Time  // when checked was taken
	checked   []readyResult
}

// readyResult is one line of /readyz.
type readyResult struct {
	name string
	err  error
}

// readyTimeout bounds the database checks of one /readyz: Kubernetes'
// probes time out after 1s by default (the kit sets 2s).
const readyTimeout = 900 * time.Millisecond

// readyCacheFor is how long /readyz reuses the answer of its database
// checks: /readyz needs no credentials, and a flood of requests must not
// take the pool's connections from the claim loops.
const readyCacheFor = time.Second

// live answers /healthz: 200 "ok" while every relay's Liveness is nil,
// else 503 and the reason (naming the table when there are several).
func (h *health) live(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	for _, tr := range h.relays {
		if err := tr.r.Liveness(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not alive: %s%v\n", h.of(tr.table), err)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

// of is "table T: " when there are several relays, else "".
func (h *health) of(t outbox.Table) string {
	if len(h.relays) < 2 {
		return ""
	}
	return "table " + t.String() + ": "
}

// named is name, followed by the table when there are several relays.
func (h *health) named(name string, t outbox.Table) string {
	if len(h.relays) < 2 {
		return name
	}
	return name + " " + t.String()
}

// ready answers /readyz: 200 when every check passes, else 503; the body
// has one line per check, "name: ok" or "name: the reason".
func (h *health) ready(w http.ResponseWriter, _ *http.Request) {
	var results []readyResult
	for _, tr := range h.relays {
		results = append(results, readyResult{h.named("relay", tr.table), tr.r.Liveness()})
	}
	results = append(results, h.databaseChecks()...)
	if o := h.outage(); o.Down {
		results = append(results, readyResult{"sink", fmt.Errorf("outage since %s (%s ago): %s", o.Since.UTC().Format(time.RFC3339), time.Since(o.Since).Round(time.Second), o.Cause)})
	} else {
		results = append(results, readyResult{"sink", nil})
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	for _, r := range results {
		if r.err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			break
		}
	}
	for _, r := range results {
		if r.err == nil {
			fmt.Fprintf(w, "%s: ok\n", r.name)
		} else {
			fmt.Fprintf(w, "%s: %s\n", r.name, oneLine(r.err.Error()))
		}
	}
}

// databaseChecks returns the database and schema lines of /readyz: those
// of the last check when it ended less than readyCacheFor ago, else those
// of a new one. One check runs at a time, bounded by h.timeout; requests
// that come meanwhile wait for it and share its answer.
func (h *health) databaseChecks() []readyResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.checked != nil && h.clock().Sub(h.checkedAt) < readyCacheFor {
		return h.checked
	}
	// Not the request's context: the answer is shared.
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	err := h.ping(ctx)
	results := []readyResult{{"database", err}}
	for _, tr := range h.relays {
		r := readyResult{h.named("schema", tr.table), errors.New("not checked: the database did not answer")}
		if err == nil {
			r.err = h.check(ctx, tr.table)
		}
		results = append(results, r)
	}
	h.checked, h.checkedAt = results, h.clock()
	return results
}

// clock is h.now, or time.Now.
func (h *health) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}

// oneLine keeps a reason on one line of the /readyz body.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// serveMetrics starts the metrics and health listener of --metrics-addr
// for the relays of fl, which read their tables on pool, and logs the
// address it is bound to; with metrics off it does nothing. stop closes
// the listener and ends the backlog reads.
func (o *runOptions) serveMetrics(logger *slog.Logger, fl *fleet, db *database) (stop func(), err error) {
	if o.metrics == nil {
		return func() {}, nil
	}
	h := &health{
		relays: fl.relays, ping: db.ping, outage: o.metrics.m.RelayOutage, timeout: readyTimeout,
		check: db.check,
	}
	bound, stop, err := o.metrics.serve(o.mf.addr, o.mf, fl, h)
	if err != nil {
		return nil, usageError("invalid value for --metrics-addr (%s): %v", envName("metrics-addr"), err)
	}
	logger.Info("serving metrics and health checks", "address", bound.String(), "paths", "/metrics /healthz /readyz")
	return stop, nil
}
