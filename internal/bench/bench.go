package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Run measures cfg.Mode once per relay count in cfg.Relays and returns the
// report. In burn-down mode it first measures the SQL ceiling (unless
// cfg.NoCeiling). It blocks until every run is done; on an error it
// returns the report of the runs so far with the error. Every child
// process it started has exited when it returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h, err := newHarness(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer h.close()
	rep := &Report{Mode: cfg.Mode, Settings: h.settings(), Ceiling: []CeilingResult{}, Runs: []Result{}}
	if cfg.Mode == ModeBurnDown && !cfg.NoCeiling {
		if h.my != nil {
			rep.Ceiling, err = runMySQLCeiling(ctx, cfg, h.my)
		} else {
			rep.Ceiling, err = runCeiling(ctx, cfg, h.pool)
		}
		if err != nil {
			return rep, err
		}
		if rep.SinkCeiling, err = runSinkCeiling(ctx, cfg, h.sink); err != nil {
			return rep, err
		}
	}
	for _, n := range cfg.Relays {
		res, err := h.run(ctx, n)
		if cfg.Mode == ModeBurnDown {
			res.CeilingRatio = ratio(res.EventsPerSecond, mainCeiling(rep.Ceiling))
			if rep.SinkCeiling != nil {
				res.SinkCeilingRatio = ratio(res.EventsPerSecond, rep.SinkCeiling.EventsPerSecond)
			}
		}
		rep.Runs = append(rep.Runs, res)
		if err != nil {
			return rep, fmt.Errorf("%s with %d relays: %w", cfg.Mode, n, err)
		}
	}
	return rep, nil
}

// harness is what the runs of one Run share: the database pool and the
// sink.
type harness struct {
	cfg     Config
	pool    *pgxpool.Pool // PostgreSQL's; nil on MySQL
	my      *sql.DB       // MySQL's or MariaDB's; nil on PostgreSQL
	server  string        // the MySQL server's version
	sink    *sink
	localDB bool // the server runs on this host: /proc shows its backends
}

func newHarness(ctx context.Context, cfg Config) (*harness, error) {
	if isMySQL(cfg.DatabaseURL) {
		db, v, err := openMySQL(ctx, cfg.DatabaseURL, cfg.Writers+4)
		if err != nil {
			return nil, err
		}
		return (&harness{cfg: cfg, my: db, server: v.String()}).openSink(ctx)
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	pc.MaxConns = int32(cfg.Writers + 4) // writers, sampler, poller, statistics
	if _, set := pc.ConnConfig.RuntimeParams["application_name"]; !set {
		pc.ConnConfig.RuntimeParams["application_name"] = "relay-bench"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	h := &harness{cfg: cfg, pool: pool, localDB: isLocal(pc.ConnConfig.Host)}
	if err := pool.Ping(ctx); err != nil {
		h.close()
		return nil, fmt.Errorf("cannot reach PostgreSQL (start it, or pass another database URL): %w", err)
	}
	return h.openSink(ctx)
}

// openSink opens the sink of h.cfg; on an error it closes h.
func (h *harness) openSink(ctx context.Context) (*harness, error) {
	var err error
	if h.sink, err = openSink(ctx, h.cfg); err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

// isLocal reports whether host is this machine.
func isLocal(host string) bool {
	return host == "127.0.0.1" || host == "localhost" || host == "::1" || strings.HasPrefix(host, "/")
}

func (h *harness) close() {
	if h.sink != nil {
		if err := h.sink.close(); err != nil {
			fmt.Fprintf(h.cfg.Progress, "warning: %s sink: %v\n", h.cfg.Sink, err)
		}
	}
	if h.pool != nil {
		h.pool.Close()
	}
	if h.my != nil {
		_ = h.my.Close()
	}
}

func (h *harness) settings() Settings {
	c := h.cfg
	s := Settings{
		Schema: c.Schema, BatchSize: c.BatchSize, PayloadBytes: c.PayloadBytes, PollIntervalMS: ms(c.PollInterval), RelayArgs: c.RelayArgs,
		NoNotify: c.NoNotify, Database: "postgresql",
	}
	if h.my != nil {
		s.Database, s.ServerVersion = "mysql", h.server
	}
	h.sink.reportSettings(&s)
	switch c.Mode {
	case ModeBurnDown:
		s.Events = c.Events
		if !c.NoCeiling {
			s.CeilingRows = c.CeilingRows
		}
	case ModeSteady:
		s.Rate, s.Writers, s.DurationS, s.GraceS = c.Rate, c.Writers, c.Duration.Seconds(), c.Grace.Seconds()
	case ModeIdle:
		s.DurationS = c.Duration.Seconds()
	case ModeSoak:
		s.Rate, s.Writers, s.DurationS, s.GraceS = c.Rate, c.Writers, c.Duration.Seconds(), c.Grace.Seconds()
		s.RetentionS, s.JanitorIntervalS, s.JanitorBatch = c.Retention.Seconds(), c.JanitorInterval.Seconds(), c.JanitorBatch
		s.PartitionIntervalS = c.PartitionInterval.Seconds()
		s.SampleEveryS, s.VacuumEveryS = c.SampleEvery.Seconds(), c.VacuumEvery.Seconds()
	}
	return s
}

// run is one mode with n relays, in a freshly migrated schema and a fresh
// topic (a destination the sink makes, removed at the end).
func (h *harness) run(ctx context.Context, n int) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	res := Result{Mode: h.cfg.Mode, Relays: n, BatchSize: h.cfg.BatchSize}
	var table outbox.Table
	var err error
	if h.my != nil {
		table, err = prepareMySQLOutbox(ctx, h.my, h.cfg.Schema)
	} else {
		table, err = prepareOutbox(ctx, h.pool, h.cfg.Schema, !h.cfg.NoNotify, migrations.Options{PartitionInterval: h.cfg.PartitionInterval})
	}
	if err != nil {
		return res, err
	}
	topic := fmt.Sprintf("bench.%s.%s.r%d.%d", h.cfg.Schema, h.cfg.Mode, n, time.Now().UnixMilli())
	if err := h.sink.prepare(ctx, topic); err != nil {
		return res, err
	}
	defer func() {
		if err := h.sink.cleanup(context.WithoutCancel(ctx), topic); err != nil {
			fmt.Fprintf(h.cfg.Progress, "warning: %v\n", err)
		}
	}()
	r := &runner{harness: h, table: table, topic: topic, relays: n, res: &res}
	switch {
	case h.my != nil: // burn-down, the only mode Config.validate lets through
		err = r.burnDownMySQL(ctx)
	case h.cfg.Mode == ModeBurnDown:
		err = r.burnDown(ctx)
	case h.cfg.Mode == ModeSteady:
		err = r.steady(ctx)
	case h.cfg.Mode == ModeIdle:
		err = r.idle(ctx)
	case h.cfg.Mode == ModeSoak:
		err = r.soak(ctx)
	}
	if err == nil {
		fmt.Fprintf(h.cfg.Progress, "%s: %d relays: %s\n", h.cfg.Mode, n, summaryLine(res))
	}
	return res, err
}

// ms converts d to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// wait waits d or until ctx ends.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
