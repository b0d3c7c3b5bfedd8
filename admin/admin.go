package admin

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// DB is what Admin needs of a database handle; *pgxpool.Pool and *pgx.Conn
// satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config configures an Admin.
type Config struct {
	// Table is the outbox table. Defaults to public.outbox.
	Table outbox.Table
	// Actor names who acts, for the audit trail and the log: a person
	// (user@host) or a tool. Required by the actions that change rows.
	Actor string
	// Logger receives one INFO line per change, and DEBUG lines for reads.
	// Defaults to discarding them.
	Logger *slog.Logger
	// SessionPrefix is the application_name prefix by which Status finds
	// the relays connected to the database. Defaults to
	// DefaultSessionPrefix, which relay run uses.
	SessionPrefix string
	// RecentSent is how many of the most recently sent rows Status samples
	// to name the relays that sent them. Defaults to 1000.
	RecentSent int
}

// DefaultSessionPrefix starts the application_name of relay run's
// database sessions: "outboxrelay <replica id>".
const DefaultSessionPrefix = "outboxrelay "

// Errors, for errors.Is.
var (
	// ErrNoActor means a change was asked of an Admin without an Actor.
	ErrNoActor = errors.New("admin: an actor is required to change rows (Config.Actor)")
	// ErrNoFilter means a change would have applied to every row of a
	// state: say so with Filter.All, or narrow it.
	ErrNoFilter = errors.New("admin: no filter: give ids, topics, a time range or error text, or set All")
	// ErrNotFound means ids given to Replay are not in the table (the
	// retention janitor deleted them, or they never existed); the error
	// is a *NotFoundError naming them.
	ErrNotFound = errors.New("not in the table")
)

// Admin runs the admin operations on one outbox table. It is safe for
// concurrent use.
type Admin struct {
	db  DB      // PostgreSQL (New)
	my  *sql.DB // MySQL or MariaDB (NewMySQL)
	cfg Config
	log *slog.Logger
	q   statements
}

// New returns an Admin for cfg.Table on db. It does not touch the
// database; each operation checks first that the table carries every
// migration (migrations.ErrNotMigrated otherwise).
func New(db DB, cfg Config) (*Admin, error) {
	if db == nil {
		return nil, errors.New("admin: a database is required")
	}
	if err := cfg.Table.Validate(); err != nil {
		return nil, err
	}
	cfg.Table = cfg.Table.WithDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.SessionPrefix == "" {
		cfg.SessionPrefix = DefaultSessionPrefix
	}
	if cfg.RecentSent <= 0 {
		cfg.RecentSent = 1000
	}
	return &Admin{
		db: db, cfg: cfg, q: loadStatements(cfg.Table),
		log: cfg.Logger.With("table", cfg.Table.String(), "actor", cfg.Actor),
	}, nil
}

// WithActor returns an Admin like a, on the same database and table, that
// acts as actor: for a caller that acts for several people, such as a
// console serving each operator under their own name.
func (a *Admin) WithActor(actor string) *Admin {
	b := *a
	b.cfg.Actor = actor
	b.log = a.cfg.Logger.With("table", a.Name(), "actor", actor)
	return &b
}

// Table returns the outbox table the Admin works on.
func (a *Admin) Table() outbox.Table { return a.cfg.Table }

// Name returns the table's name for messages: schema.table on PostgreSQL;
// database.table on MySQL, or the table alone when it is in the
// connection's database.
func (a *Admin) Name() string {
	if a.my != nil && a.cfg.Table.Schema == "" {
		return a.cfg.Table.Name
	}
	return a.cfg.Table.String()
}

// statements are the admin statements for one table, each named for its
// file in sql/.
type statements struct {
	now, statesOf, audit, auditAt, auditList, orderedInUse string
	statusCounts, statusSent, statusHolders, statusSenders string
	statusSessions, statusShards, statusJobs               string
	failedList, failedCount, failedPick                    string
	failedRetry, failedPurge                               string
	replayPick, replay, replayCount                        string
}

// loadStatements reads the statements for table: {{table}}, {{shards}},
// {{jobs}} and {{audit}} name the outbox table and its related tables.
func loadStatements(table outbox.Table) statements {
	names := strings.NewReplacer("{{table}}", table.Ident(), "{{shards}}", table.Related("shard_ranges"),
		"{{jobs}}", table.Related("jobs"), "{{audit}}", table.Related("audit"))
	file := func(name string) string {
		b, err := sqlFiles.ReadFile("sql/" + name + ".sql")
		if err != nil {
			panic(err) // embedded: a missing file is a build mistake
		}
		return names.Replace(string(b))
	}
	return statements{
		now: file("now"), statesOf: file("states_of"), audit: file("audit"), auditList: file("audit_list"),
		orderedInUse: file("ordered_in_use"),
		statusCounts: file("status_counts"), statusSent: file("status_sent"), statusHolders: file("status_holders"),
		statusSenders: file("status_senders"), statusSessions: file("status_sessions"), statusShards: file("status_shards"),
		statusJobs: file("status_jobs"),
		failedList: file("failed_list"), failedCount: file("failed_count"), failedRetry: file("failed_retry"),
		failedPurge: file("failed_purge"),
		replay:      file("replay"), replayCount: file("replay_count"),
	}
}

// oneShot makes pgx send a statement unnamed, so that PostgreSQL plans it
// for the values given: the filters' "$n IS NULL OR ..." parts then fold
// away and the partial indexes are chosen, which a cached generic plan
// could not do.
const oneShot = pgx.QueryExecModeDescribeExec

// check verifies the table's schema (migrations.Check, or on MySQL
// migrations.CheckMySQL).
func (a *Admin) check(ctx context.Context) error {
	if a.my != nil {
		return migrations.CheckMySQL(ctx, a.my, a.cfg.Table)
	}
	return migrations.Check(ctx, a.db, a.cfg.Table)
}

// Now returns the database clock, against which relative times ("the last
// two hours") are to be measured.
func (a *Admin) Now(ctx context.Context) (time.Time, error) {
	if a.my != nil {
		return a.nowMySQL(ctx)
	}
	var now time.Time
	if err := a.db.QueryRow(ctx, a.q.now, oneShot).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("admin: read the database clock: %w", err)
	}
	return now, nil
}

// Result is what an action did, or with DryRun would do.
type Result struct {
	// Action names it: "failed.retry", "failed.purge" or "replay".
	Action string `json:"action"`
	// DryRun is true when nothing was changed: Rows counts the rows the
	// filter matches now, and IDs is empty.
	DryRun bool `json:"dry_run"`
	// Rows counts the rows changed (or, in a dry run, matched).
	Rows int64 `json:"rows"`
	// IDs are the rows changed, in id order.
	IDs []string `json:"ids,omitempty"`
	// Left counts the rows the filter still matched, in the change's
	// transaction, that ActionOptions.Limit left alone: counted when the
	// limit was reached, 0 otherwise and in a dry run.
	Left int64 `json:"left,omitempty"`
	// Skipped are the ids the filter named that were left alone, with
	// their state ("" when the table does not hold them).
	Skipped []Skipped `json:"skipped,omitempty"`
	// AuditID and At are the audit trail entry of the change and its
	// time (the database clock); zero for a dry run.
	AuditID int64     `json:"audit_id,omitempty"`
	At      time.Time `json:"at"`
	// Ordered is true when ordered delivery has served the table (its
	// shard table has rows): rows put back to pending take their place in
	// their key's order (docs/ordering.md#replaying-sent-events).
	Ordered bool `json:"ordered"`
}

// Skipped is an id an action was given but did not change.
type Skipped struct {
	ID string `json:"id"`
	// State is the row's state (pending, processing, sent or failed), or
	// "" when the table does not hold the id.
	State string `json:"state"`
}

// remainder is how a change counts the rows its limit left alone
// (Result.Left): the limit, and the count statement of its filter with
// its parameters.
type remainder struct {
	limit int64
	count string
	args  []any
}

// change runs one changing statement and its audit entry in one
// transaction, and logs it. ids are the ids the filter named, if any: the
// ones not changed are reported in Skipped. abort, when set, may refuse
// the result (the transaction is then rolled back). left counts what the
// limit left.
func (a *Admin) change(ctx context.Context, action string, what any, ids []string, abort func(Result) error, left remainder, sql string, args ...any) (Result, error) {
	res := Result{Action: action}
	if a.cfg.Actor == "" {
		return res, ErrNoActor
	}
	if err := a.check(ctx); err != nil {
		return res, err
	}
	filter, err := json.Marshal(what)
	if err != nil {
		return res, fmt.Errorf("admin: %s: encode the filter: %w", action, err)
	}
	tx, err := a.db.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("admin: %s: begin: %w", action, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.Exec(ctx, indexSettings); err != nil {
		return res, fmt.Errorf("admin: %s: %w", action, err)
	}
	rows, err := tx.Query(ctx, sql, append([]any{oneShot}, args...)...)
	if err != nil {
		return res, fmt.Errorf("admin: %s: %w", action, err)
	}
	changed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return res, fmt.Errorf("admin: %s: %w", action, err)
	}
	res.IDs, res.Rows = changed, int64(len(changed))
	if len(ids) > 0 {
		if res.Skipped, err = a.skipped(ctx, tx, ids, changed); err != nil {
			return res, fmt.Errorf("admin: %s: %w", action, err)
		}
	}
	if abort != nil {
		if err := abort(res); err != nil {
			return Result{Action: action, Skipped: res.Skipped}, err
		}
	}
	if left.limit > 0 && res.Rows == left.limit {
		if err := tx.QueryRow(ctx, left.count, append([]any{oneShot}, left.args...)...).Scan(&res.Left); err != nil {
			return res, fmt.Errorf("admin: %s: count the rows left: %w", action, err)
		}
	}
	if err := tx.QueryRow(ctx, a.q.orderedInUse, oneShot).Scan(&res.Ordered); err != nil {
		return res, fmt.Errorf("admin: %s: %w", action, err)
	}
	if err := tx.QueryRow(ctx, a.q.audit, oneShot, a.cfg.Actor, action, filter, res.Rows).Scan(&res.AuditID, &res.At); err != nil {
		return res, fmt.Errorf("admin: %s: write the audit entry: %w", action, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("admin: %s: commit: %w", action, err)
	}
	a.log.Info("admin action", "action", action, "rows", res.Rows, "left", res.Left, "skipped", len(res.Skipped),
		"filter", json.RawMessage(filter), "audit_id", res.AuditID)
	return res, nil
}

// querier is a DB or a pgx.Tx.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// skipped returns the ids among given that are not in changed, with their
// state as q sees it.
func (a *Admin) skipped(ctx context.Context, q querier, given, changed []string) ([]Skipped, error) {
	done := map[string]bool{}
	for _, id := range changed {
		done[id] = true
	}
	var rest []string
	for _, id := range given {
		if !done[id] {
			rest = append(rest, id)
			done[id] = true // once each
		}
	}
	if len(rest) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, a.q.statesOf, oneShot, rest)
	if err != nil {
		return nil, err
	}
	state := map[string]string{}
	var id, st string
	if _, err := pgx.ForEachRow(rows, []any{&id, &st}, func() error { state[id] = st; return nil }); err != nil {
		return nil, err
	}
	out := make([]Skipped, 0, len(rest))
	for _, id := range rest {
		out = append(out, Skipped{ID: id, State: state[id]})
	}
	return out, nil
}

// dryRun is an action's result without changing anything: n rows match
// now (at most limit of them would change), and of the ids the filter
// names, those not in state want are reported as Skipped.
func (a *Admin) dryRun(ctx context.Context, action string, n, limit int64, ids []string, want string) (Result, error) {
	res := Result{Action: action, DryRun: true, Rows: min(n, limitOr(limit, n))}
	if err := a.db.QueryRow(ctx, a.q.orderedInUse, oneShot).Scan(&res.Ordered); err != nil {
		return res, fmt.Errorf("admin: %s: %w", action, err)
	}
	if len(ids) == 0 {
		return res, nil
	}
	all, err := a.skipped(ctx, a.db, ids, nil)
	if err != nil {
		return res, fmt.Errorf("admin: %s: %w", action, err)
	}
	for _, s := range all {
		if s.State != want {
			res.Skipped = append(res.Skipped, s)
		}
	}
	return res, nil
}
