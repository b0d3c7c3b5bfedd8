package admin

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/migrations"
)

// Status is a snapshot of an outbox table and of the relays serving it.
// Ages and lease ends are seconds on the database clock.
type Status struct {
	Table string `json:"table"`
	// At is the database clock when the snapshot was taken.
	At time.Time `json:"at"`
	// Totals are the rows by state, over every topic.
	Totals Totals `json:"totals"`
	// Topics are the unfinished and failed rows by topic (sent rows are
	// not counted per topic: see Totals.Sent).
	Topics []TopicCounts `json:"topics"`
	// OldestDueSeconds is how long the oldest due pending row has been
	// due, the age that grows when the relays fall behind; nil when no
	// row is due.
	OldestDueSeconds *float64 `json:"oldest_due_seconds"`
	// OldestLapsedSeconds is how long ago the oldest lapsed lease ended
	// (a processing row whose relay died or froze); nil when none.
	OldestLapsedSeconds *float64 `json:"oldest_lapsed_seconds"`
	// OldestSentAt is when the oldest sent row still in the table was
	// sent: replay reaches no further back. Nil when there is none.
	OldestSentAt *time.Time `json:"oldest_sent_at"`
	// Holders are the relays holding processing rows (lease claims).
	Holders []Holder `json:"holders"`
	// RecentSenders are the relays that sent the most recently sent rows
	// (a sample of Config.RecentSent rows).
	RecentSenders []Sender `json:"recent_senders"`
	// Sessions are the relays connected to the database now, by
	// application_name (relay run sets it; any outbox table of the
	// database).
	Sessions []Session `json:"sessions"`
	// SessionsNote says why Sessions is empty when they cannot be listed
	// (SessionsNoteMySQL: a MySQL or MariaDB server with its performance
	// schema off); "" otherwise.
	SessionsNote string `json:"sessions_note,omitempty"`
	// Dialect is "mysql" on MySQL and MariaDB, which have no ordered
	// delivery or partitioned tables (Ordered and Partitions stay nil);
	// "" on PostgreSQL.
	Dialect string `json:"dialect,omitempty"`
	// Ordered is the shard table of ordered delivery; nil when it has no
	// rows (no relay ran with --ordered-topics).
	Ordered *Ordered `json:"ordered"`
	// Jobs are the periodic jobs (the retention janitor, and a
	// partitioned table's partitions job).
	Jobs []Job `json:"jobs"`
	// Partitions are a partitioned table's partitions, oldest first, the
	// DEFAULT partition last; nil for an unpartitioned table
	// (docs/architecture.md#partitioned-tables).
	Partitions []Partition `json:"partitions,omitempty"`
	// SinkOutage says what the database can tell of a sink outage:
	// nothing, as a relay keeps its outage state in memory (see
	// SinkOutageUnknown).
	SinkOutage string `json:"sink_outage"`
}

// SinkOutageUnknown is Status.SinkOutage: a relay's breaker state is not
// written to the database.
const SinkOutageUnknown = "unknown: the relays keep their sink outage state in memory; " +
	"read the outbox_sink_outage gauge on each relay's /metrics (--metrics-addr)"

// Totals are a table's rows by state.
type Totals struct {
	PendingDue     int64 `json:"pending_due"`
	PendingDelayed int64 `json:"pending_delayed"` // next_retry_at in the future: retries and DeliverAt
	Processing     int64 `json:"processing"`
	// Lapsed are processing rows whose lease ended; the next claim takes
	// them back.
	Lapsed int64 `json:"lapsed"`
	Failed int64 `json:"failed"`
	// Parked are failed rows parked by ordered delivery (--head-of-line
	// park).
	Parked int64 `json:"parked"`
	// Sent is exact when SentExact: always with StatusOptions.ExactSent,
	// and when there are fewer than SentCountLimit. Otherwise it is the
	// planner's estimate, or SentCountLimit when that is lower (or the
	// table was never analyzed).
	Sent      *int64 `json:"sent"`
	SentExact bool   `json:"sent_exact"`
}

// TopicCounts are one topic's unfinished and failed rows.
type TopicCounts struct {
	Topic          string `json:"topic"`
	PendingDue     int64  `json:"pending_due"`
	PendingDelayed int64  `json:"pending_delayed"`
	Processing     int64  `json:"processing"`
	Failed         int64  `json:"failed"`
	// OldestDueSeconds is as in Status, for this topic.
	OldestDueSeconds *float64 `json:"oldest_due_seconds"`
}

// Holder is a relay holding processing rows.
type Holder struct {
	Relay  string `json:"relay"`
	Rows   int64  `json:"rows"`
	Claims int64  `json:"claims"`
	// FirstLeaseEnd and LastLeaseEnd are seconds from now; negative ones
	// have lapsed.
	FirstLeaseEnd float64 `json:"first_lease_end_seconds"`
	LastLeaseEnd  float64 `json:"last_lease_end_seconds"`
}

// Sender is a relay among the senders of the most recently sent rows.
type Sender struct {
	Relay string `json:"relay"`
	Rows  int64  `json:"rows"`
	// LastSentSeconds is how long ago its latest row was sent.
	LastSentSeconds float64 `json:"last_sent_seconds"`
}

// Session is a relay connected to the database.
type Session struct {
	Relay       string `json:"relay"`
	Connections int64  `json:"connections"`
	// SinceSecs is how long its oldest session has been connected; 0 on
	// MySQL and MariaDB, which do not record it.
	SinceSecs float64 `json:"connected_seconds"`
	Clients   string  `json:"clients"` // client addresses, comma-separated; "" when hidden
	// ServesTable is true when the relay was seen on this table: it holds
	// rows or a shard, is among the recent senders, or ran the janitor.
	// Sessions name no table, so a relay of another outbox table of the
	// database, or one that has done nothing here yet, has it false.
	ServesTable bool `json:"serves_table"`
}

// Ordered is the state of ordered delivery's shards.
type Ordered struct {
	Shards int     `json:"shards"`
	Leased []Shard `json:"leased"`
}

// Shard is a leased shard.
type Shard struct {
	Shard    int     `json:"shard"`
	HeldBy   string  `json:"held_by"`
	LeaseEnd float64 `json:"lease_end_seconds"`
	// InFlight is how many rows its holder's last claim took and has not
	// written an outcome for yet (they stay pending: docs/ordering.md).
	InFlight int `json:"in_flight"`
}

// Job is a periodic job's row (migration 004).
type Job struct {
	Job string `json:"job"`
	// LastRunBy is the token of the latest run ("<replica id>#<n>").
	LastRunBy string `json:"last_run_by"`
	// Running is true while a run holds the job.
	Running bool `json:"running"`
	// NextRunSeconds is in how long the job is due (negative: overdue).
	NextRunSeconds float64 `json:"next_run_seconds"`
	// LastStartedSeconds and LastFinishedSeconds are how long ago; nil
	// when never.
	LastStartedSeconds  *float64 `json:"last_started_seconds"`
	LastFinishedSeconds *float64 `json:"last_finished_seconds"`
	LastDeleted         *int64   `json:"last_deleted"`
	TotalDeleted        int64    `json:"total_deleted"`
}

// Partition is one partition of a partitioned table.
type Partition struct {
	Name string `json:"name"`
	// From and To bound when its events were made; both nil for the
	// DEFAULT partition.
	From *time.Time `json:"from"`
	To   *time.Time `json:"to"`
	// Rows is the planner's estimate (-1 before the partition's first
	// ANALYZE), Bytes its size with indexes and TOAST.
	Rows  int64 `json:"rows_estimate"`
	Bytes int64 `json:"bytes"`
}

// StatusOptions tune Status.
type StatusOptions struct {
	// ExactSent counts sent rows exactly, through sent_idx, however many
	// there are: as long as an index-only scan of all of them takes.
	// Without it Status counts up to SentCountLimit and estimates beyond.
	ExactSent bool
}

// SentCountLimit is how many sent rows Status counts without
// StatusOptions.ExactSent: reading that many index entries takes
// milliseconds, so a small table's count is exact.
const SentCountLimit = 10_000

// sentLimit is the count Status makes: up to SentCountLimit rows, or all.
func sentLimit(o StatusOptions) int64 {
	if o.ExactSent {
		return math.MaxInt64
	}
	return SentCountLimit
}

// setSent fills in the sent rows from counted, of at most limit, and the
// estimate (nil when the database has none).
func (t *Totals) setSent(counted int64, estimate *int64, limit int64) {
	t.Sent, t.SentExact = &counted, counted < limit
	if !t.SentExact && estimate != nil && *estimate > counted {
		t.Sent = estimate
	}
}

// indexSettings steer the statements of a transaction to the partial
// indexes (Status) and away from bitmap scans (every change), for that
// transaction only.
const indexSettings = "SELECT set_config('enable_seqscan', 'off', true), " +
	"set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true)"

// Status takes a snapshot of the table, in one read-only transaction
// (REPEATABLE READ, so that every part sees the same rows). It reads the
// pending, processing and failed rows through their partial indexes, the
// newest Config.RecentSent sent rows, the shard and job tables and
// pg_stat_activity; beyond SentCountLimit the sent rows are estimated
// unless o.ExactSent.
func (a *Admin) Status(ctx context.Context, o StatusOptions) (*Status, error) {
	if err := a.check(ctx); err != nil {
		return nil, err
	}
	if a.my != nil {
		return a.statusMySQL(ctx, o)
	}
	tx, err := a.db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: status: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only: nothing to commit
	if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return nil, fmt.Errorf("admin: status: %w", err)
	}
	// The partial indexes, whatever the planner thinks: with a backlog of
	// a few percent of the table it prefers a parallel scan of the whole
	// table, which on a large table reads several times the pages that
	// reading the backlog through its index does. Bitmap scans are off for the
	// reason relay.ConfigurePool gives.
	if _, err := tx.Exec(ctx, indexSettings); err != nil {
		return nil, fmt.Errorf("admin: status: %w", err)
	}
	s := &Status{Table: a.Name(), SinkOutage: SinkOutageUnknown,
		Topics: []TopicCounts{}, Holders: []Holder{}, RecentSenders: []Sender{}, Sessions: []Session{}, Jobs: []Job{}}
	for _, part := range []struct {
		what string
		fn   func(context.Context, pgx.Tx, *Status, StatusOptions) error
	}{
		{"count rows", a.statusCounts}, {"count sent rows", a.statusSent}, {"read holders", a.statusHolders},
		{"read recent senders", a.statusSenders}, {"read sessions", a.statusSessions},
		{"read shards", a.statusShards}, {"read jobs", a.statusJobs}, {"read partitions", a.statusPartitions},
	} {
		if err := part.fn(ctx, tx, s, o); err != nil {
			return nil, fmt.Errorf("admin: status: %s: %w", part.what, err)
		}
	}
	s.markServing()
	a.log.Debug("status read")
	return s, nil
}

func (a *Admin) statusCounts(ctx context.Context, tx pgx.Tx, s *Status, _ StatusOptions) error {
	rows, err := tx.Query(ctx, a.q.statusCounts, oneShot)
	if err != nil {
		return err
	}
	var (
		state, topic string
		n, sub       int64
		age          *float64
	)
	byTopic := map[string]int{} // index into s.Topics
	_, err = pgx.ForEachRow(rows, []any{&state, &topic, &n, &sub, &age}, func() error {
		s.addCounts(byTopic, state, topic, n, sub, age)
		return nil
	})
	return err
}

// copyPtr returns a pointer to a copy of *p, or nil: pgx may reuse what a
// scanned pointer points to for the next row.
func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// maxPtr returns the larger of two optional values.
func maxPtr(a, b *float64) *float64 {
	switch {
	case b == nil:
		return a
	case a == nil || *b > *a:
		v := *b
		return &v
	}
	return a
}

func (a *Admin) statusSent(ctx context.Context, tx pgx.Tx, s *Status, o StatusOptions) error {
	others := s.Totals.PendingDue + s.Totals.PendingDelayed + s.Totals.Processing + s.Totals.Failed
	limit := sentLimit(o)
	var counted int64
	var estimate *int64
	err := tx.QueryRow(ctx, a.q.statusSent, oneShot, limit, others).Scan(&s.At, &counted, &estimate, &s.OldestSentAt)
	s.Totals.setSent(counted, estimate, limit)
	return err
}

func (a *Admin) statusHolders(ctx context.Context, tx pgx.Tx, s *Status, _ StatusOptions) error {
	rows, err := tx.Query(ctx, a.q.statusHolders, oneShot)
	if err != nil {
		return err
	}
	var h Holder
	_, err = pgx.ForEachRow(rows, []any{&h.Relay, &h.Rows, &h.Claims, &h.FirstLeaseEnd, &h.LastLeaseEnd}, func() error {
		s.Holders = append(s.Holders, h)
		return nil
	})
	return err
}

func (a *Admin) statusSenders(ctx context.Context, tx pgx.Tx, s *Status, _ StatusOptions) error {
	rows, err := tx.Query(ctx, a.q.statusSenders, oneShot, a.cfg.RecentSent)
	if err != nil {
		return err
	}
	var r Sender
	_, err = pgx.ForEachRow(rows, []any{&r.Relay, &r.Rows, &r.LastSentSeconds}, func() error {
		s.RecentSenders = append(s.RecentSenders, r)
		return nil
	})
	return err
}

func (a *Admin) statusSessions(ctx context.Context, tx pgx.Tx, s *Status, _ StatusOptions) error {
	rows, err := tx.Query(ctx, a.q.statusSessions, oneShot, a.cfg.SessionPrefix)
	if err != nil {
		return err
	}
	var c Session
	_, err = pgx.ForEachRow(rows, []any{&c.Relay, &c.Connections, &c.SinceSecs, &c.Clients}, func() error {
		s.Sessions = append(s.Sessions, c)
		return nil
	})
	return err
}

func (a *Admin) statusShards(ctx context.Context, tx pgx.Tx, s *Status, _ StatusOptions) error {
	rows, err := tx.Query(ctx, a.q.statusShards, oneShot)
	if err != nil {
		return err
	}
	var (
		shard    int
		by       *string
		end      *float64
		inFlight int
		ord      = Ordered{Leased: []Shard{}}
	)
	_, err = pgx.ForEachRow(rows, []any{&shard, &by, &end, &inFlight}, func() error {
		ord.Shards++
		if by != nil && end != nil && *end > 0 {
			ord.Leased = append(ord.Leased, Shard{Shard: shard, HeldBy: *by, LeaseEnd: *end, InFlight: inFlight})
		}
		return nil
	})
	if ord.Shards > 0 {
		s.Ordered = &ord
	}
	return err
}

func (a *Admin) statusJobs(ctx context.Context, tx pgx.Tx, s *Status, _ StatusOptions) error {
	rows, err := tx.Query(ctx, a.q.statusJobs, oneShot)
	if err != nil {
		return err
	}
	var j Job
	_, err = pgx.ForEachRow(rows, []any{&j.Job, &j.LastRunBy, &j.Running, &j.NextRunSeconds,
		&j.LastStartedSeconds, &j.LastFinishedSeconds, &j.LastDeleted, &j.TotalDeleted}, func() error {
		c := j
		c.LastStartedSeconds, c.LastFinishedSeconds, c.LastDeleted = copyPtr(j.LastStartedSeconds), copyPtr(j.LastFinishedSeconds), copyPtr(j.LastDeleted)
		s.Jobs = append(s.Jobs, c)
		return nil
	})
	return err
}

// markServing sets ServesTable on the sessions of relays seen on the
// table.
func (s *Status) markServing() {
	seen := map[string]bool{}
	for _, h := range s.Holders {
		seen[h.Relay] = true
	}
	for _, r := range s.RecentSenders {
		seen[r.Relay] = true
	}
	if s.Ordered != nil {
		for _, sh := range s.Ordered.Leased {
			seen[RelayOf(sh.HeldBy)] = true
		}
	}
	for _, j := range s.Jobs {
		seen[RelayOf(j.LastRunBy)] = true
	}
	for i := range s.Sessions {
		s.Sessions[i].ServesTable = seen[s.Sessions[i].Relay]
	}
}

// RelayOf returns the replica id of a claim token ("<id>#<n>").
func RelayOf(token string) string {
	id, _, _ := strings.Cut(token, "#")
	return id
}

// statusPartitions lists the partitions of a partitioned table, with the
// planner's row estimates and their sizes; it reads only the catalog.
func (a *Admin) statusPartitions(ctx context.Context, tx pgx.Tx, s *Status, _ StatusOptions) error {
	table := a.cfg.Table.WithDefaults()
	if ok, err := migrations.IsPartitioned(ctx, tx, table); err != nil || !ok {
		return err
	}
	parts, err := migrations.Partitions(ctx, tx, table)
	if err != nil {
		return err
	}
	for _, p := range parts {
		from, to := p.From, p.To
		s.Partitions = append(s.Partitions, Partition{Name: p.Name, From: &from, To: &to})
	}
	if name, ok, err := migrations.DefaultPartition(ctx, tx, table); err != nil {
		return err
	} else if ok {
		s.Partitions = append(s.Partitions, Partition{Name: name})
	}
	for i := range s.Partitions {
		p := &s.Partitions[i]
		ident := pgx.Identifier{table.Schema, p.Name}.Sanitize()
		err := tx.QueryRow(ctx, "SELECT reltuples::bigint, pg_total_relation_size(oid) FROM pg_class WHERE oid = $1::regclass", ident).Scan(&p.Rows, &p.Bytes)
		if err != nil {
			return err
		}
	}
	return nil
}

// addCounts adds one row of the status counts (state, topic, rows, the
// sub-count of the state: due, lapsed or parked rows, and the age of its
// oldest) to s; byTopic indexes s.Topics by topic.
func (s *Status) addCounts(byTopic map[string]int, state, topic string, n, sub int64, age *float64) {
	i, ok := byTopic[topic]
	if !ok {
		i = len(s.Topics)
		byTopic[topic] = i
		s.Topics = append(s.Topics, TopicCounts{Topic: topic})
	}
	t := &s.Topics[i]
	switch state {
	case "pending":
		t.PendingDue, t.PendingDelayed = sub, n-sub
		s.Totals.PendingDue += sub
		s.Totals.PendingDelayed += n - sub
		t.OldestDueSeconds = copyPtr(age)
		s.OldestDueSeconds = maxPtr(s.OldestDueSeconds, age)
	case "processing":
		t.Processing = n
		s.Totals.Processing += n
		s.Totals.Lapsed += sub
		s.OldestLapsedSeconds = maxPtr(s.OldestLapsedSeconds, age)
	case "failed":
		t.Failed = n
		s.Totals.Failed += n
		s.Totals.Parked += sub
	}
}
