package metrics

import (
	"context"
	"time"

	"github.com/outboxrelay/outboxrelay/relay"
	"github.com/prometheus/client_golang/prometheus"
)

// Backlog states of outbox_backlog_rows.
const (
	StatePendingDue     = "pending_due"
	StatePendingDelayed = "pending_delayed"
	StateProcessing     = "processing"
	StateFailed         = "failed"
)

// BacklogSource reads a table's backlog: *relay.Relay does.
type BacklogSource interface {
	Backlog(ctx context.Context, limit int64) (relay.Backlog, error)
}

// Defaults of BacklogOptions.
const (
	DefaultBacklogInterval = 15 * time.Second
	DefaultBacklogTimeout  = 5 * time.Second
	DefaultBacklogLimit    = 100_000
)

// BacklogOptions configure WatchBacklog. The zero value is valid.
type BacklogOptions struct {
	// Interval is the time between two reads, measured from the start of
	// one to the start of the next. Defaults to 15s, Prometheus's usual
	// scrape interval: a read per scrape at most, not one per scraper.
	Interval time.Duration
	// Timeout bounds one read, as the statement timeout of its
	// transaction. Defaults to 5s.
	Timeout time.Duration
	// Limit is where each count stops (relay.Relay.Backlog): the cost of a
	// read is bounded by reading that many index entries per state, and a
	// larger count is the planner's estimate. Defaults to 100,000.
	Limit int64
	// Table is the value of the table label of the backlog gauges, e.g.
	// "billing.outbox": a process serving several tables watches each
	// with its own. Defaults to "public.outbox".
	Table string
}

// DefaultBacklogTable is BacklogOptions.Table's default.
const DefaultBacklogTable = "public.outbox"

// backlogGauges are the series WatchBacklog keeps, each but the limit
// labelled with its table.
type backlogGauges struct {
	rows        *prometheus.GaugeVec
	estimated   *prometheus.GaugeVec
	oldestDue   *prometheus.GaugeVec
	keysBlocked *prometheus.GaugeVec
	limit       prometheus.Gauge
	readAt      *prometheus.GaugeVec
	readTook    *prometheus.GaugeVec
	readErrors  *prometheus.CounterVec
}

func newBacklogGauges() backlogGauges {
	return backlogGauges{
		rows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_backlog_rows",
			Help: "Rows of the outbox table by state at the last backlog read: pending_due (pending, next_retry_at passed: claimable now), pending_delayed (pending, next_retry_at ahead: scheduled or waiting for a retry), processing (claimed, being published), failed. Exact below outbox_backlog_limit_rows; from there PostgreSQL's planner estimate (outbox_backlog_estimated is 1). The same on every replica: aggregate with max, not sum.",
		}, []string{"table", "state"}),
		estimated: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_backlog_estimated",
			Help: "1 when the state's outbox_backlog_rows reached outbox_backlog_limit_rows and is the planner's estimate (from the statistics of the last ANALYZE), 0 when it is an exact count.",
		}, []string{"table", "state"}),
		oldestDue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_oldest_due_age_seconds",
			Help: "now() - next_retry_at of the pending row due longest, on the database clock, at the last backlog read; 0 when no row is due. For an event never attempted next_retry_at is the insert time (its transaction's start), so this is how long the oldest unpublished event has waited; for a retried one, how long since its retry fell due.",
		}, []string{"table"}),
		keysBlocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_ordered_keys_blocked",
			Help: "Ordered delivery: keys of ordered topics whose earliest unfinished event is waiting for a retry after a failed publish, holding back the key's later events (head of line), at the last backlog read; 0 without ordered topics.",
		}, []string{"table"}),
		limit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_backlog_limit_rows",
			Help: "Where each exact count of outbox_backlog_rows stops: a read costs at most about this many index entries per state.",
		}),
		readAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_backlog_read_timestamp_seconds",
			Help: "Unix time of the last backlog read that succeeded: the backlog gauges are that old.",
		}, []string{"table"}),
		readTook: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_backlog_read_duration_seconds",
			Help: "Time the last backlog read took, successful or not.",
		}, []string{"table"}),
		readErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_backlog_read_errors_total",
			Help: "Backlog reads that failed (database unreachable, statement timeout, table missing); the gauges keep their last values.",
		}, []string{"table"}),
	}
}

func (g backlogGauges) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.rows, g.estimated, g.oldestDue, g.keysBlocked, g.limit, g.readAt, g.readTook, g.readErrors}
}

// WatchBacklog reads src's backlog at once and then every Interval, and
// keeps the backlog gauges, until ctx ends; run it in a goroutine of its
// own. A read that fails is counted (outbox_backlog_read_errors_total) and
// the gauges keep their last values; outbox_backlog_read_timestamp_seconds
// says how old they are. Reads never overlap: one that takes longer than
// Interval delays the next.
func (m *Metrics) WatchBacklog(ctx context.Context, src BacklogSource, opts BacklogOptions) {
	if opts.Interval <= 0 {
		opts.Interval = DefaultBacklogInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultBacklogTimeout
	}
	if opts.Limit <= 0 {
		opts.Limit = DefaultBacklogLimit
	}
	if opts.Table == "" {
		opts.Table = DefaultBacklogTable
	}
	// The read-errors series exists at 0 from the start.
	m.backlog.readErrors.WithLabelValues(opts.Table)
	t := time.NewTicker(opts.Interval)
	defer t.Stop()
	for {
		_ = m.ReadTableBacklog(ctx, src, opts.Table, opts.Timeout, opts.Limit)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ReadBacklog reads src's backlog once, within timeout, and sets the
// backlog gauges of DefaultBacklogTable; WatchBacklog calls it every
// interval. limit <= 0 means DefaultBacklogLimit. It returns the read's
// error.
func (m *Metrics) ReadBacklog(ctx context.Context, src BacklogSource, timeout time.Duration, limit int64) error {
	return m.ReadTableBacklog(ctx, src, DefaultBacklogTable, timeout, limit)
}

// ReadTableBacklog is ReadBacklog for the gauges whose table label is
// table (BacklogOptions.Table).
func (m *Metrics) ReadTableBacklog(ctx context.Context, src BacklogSource, table string, timeout time.Duration, limit int64) error {
	if limit <= 0 {
		limit = DefaultBacklogLimit
	}
	g := m.backlog
	g.limit.Set(float64(limit))
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	b, err := src.Backlog(rctx, limit)
	g.readTook.WithLabelValues(table).Set(time.Since(start).Seconds())
	if err != nil {
		if ctx.Err() == nil {
			g.readErrors.WithLabelValues(table).Inc()
		}
		return err
	}
	for _, s := range []struct {
		state string
		c     relay.BacklogCount
	}{{StatePendingDue, b.PendingDue}, {StatePendingDelayed, b.PendingDelayed}, {StateProcessing, b.Processing}, {StateFailed, b.Failed}} {
		g.rows.WithLabelValues(table, s.state).Set(float64(s.c.Rows))
		estimated := 0.0
		if s.c.Estimated {
			estimated = 1
		}
		g.estimated.WithLabelValues(table, s.state).Set(estimated)
	}
	g.oldestDue.WithLabelValues(table).Set(b.OldestDue.Seconds())
	g.keysBlocked.WithLabelValues(table).Set(float64(b.KeysBlocked))
	g.readAt.WithLabelValues(table).Set(float64(time.Now().UnixNano()) / 1e9)
	return nil
}
