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
	"math"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// MySQL and MariaDB.
//
// NewMySQL returns the same Admin as New, on a database/sql pool of a MySQL
// 8.0.13+ or MariaDB 10.6+ server whose table carries the MySQL migrations
// (migrations.UpMySQL). Every method works the same way, with these
// differences, which MySQL imposes:
//   - A change is two statements in one READ COMMITTED transaction: a
//     locking SELECT ... FOR UPDATE picks the rows still in the expected
//     state, then an UPDATE or DELETE by primary key changes exactly those
//     (MySQL has no UPDATE ... RETURNING). The fencing is the same: a row
//     that left the state before it was locked is not touched, and once
//     locked no relay can change it.
//   - Status has no Ordered or Partitions; Sessions come from the
//     performance schema when the server has it on (MySQL's default, not
//     MariaDB's; Status.SessionsNote says so otherwise), without the time
//     they connected (Session.SinceSecs is 0); the sent estimate is
//     InnoDB's TABLE_ROWS.
//   - Result.Ordered is always false: MySQL has no ordered delivery.
//   - Ids and topics of a filter travel as IN lists of parameters: with
//     server-side prepared statements (no interpolateParams, which
//     mysqldsn.ParseURL sets) MySQL takes at most 65,535 parameters in a
//     statement, so a filter naming more ids than that fails; the changes
//     themselves go by chunks of 1,000 ids.

//go:embed sql/mysql/*.sql
var mysqlFiles embed.FS

// changeTx is the isolation of the changes: READ COMMITTED locks only the
// rows a locking read returns, without the gap locks of REPEATABLE READ,
// which would hold up the relays' inserts and claims next to them.
var changeTx = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// changeChunk is how many ids one UPDATE or DELETE of a change names.
const changeChunk = 1000

// SessionsNoteMySQL is Status.SessionsNote on a MySQL or MariaDB server
// whose performance schema is off (MariaDB's default).
const SessionsNoteMySQL = "not listed: relay run names its sessions by the program_name connection attribute, " +
	"which only performance_schema.session_connect_attrs shows, and this server has performance_schema off; " +
	"the holders and recent senders name the relays at work on this table"

// NewMySQL returns an Admin for cfg.Table on db, a MySQL 8.0.13+ or
// MariaDB 10.6+ database. cfg.Table.Schema is the database; empty, the
// connection's. Like New it does not touch the database; each operation
// checks first that the server is supported and the table carries every
// MySQL migration (migrations.CheckMySQL). db should use UTC for its
// DATETIMEs (parseTime=true, loc=UTC), as mysqldsn.ParseURL sets.
func NewMySQL(db *sql.DB, cfg Config) (*Admin, error) {
	if db == nil {
		return nil, errors.New("admin: a database is required")
	}
	if err := cfg.Table.Validate(); err != nil {
		return nil, err
	}
	if cfg.Table.Name == "" {
		cfg.Table.Name = outbox.DefaultTable
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.SessionPrefix == "" {
		cfg.SessionPrefix = DefaultSessionPrefix
	}
	if cfg.RecentSent <= 0 {
		cfg.RecentSent = 1000
	}
	a := &Admin{my: db, cfg: cfg, q: loadMySQLStatements(cfg.Table)}
	a.log = cfg.Logger.With("table", a.Name(), "actor", cfg.Actor)
	return a, nil
}

// loadMySQLStatements reads the statements of sql/mysql/ for table:
// {{table}}, {{jobs}} and {{audit}} name the outbox table and its related
// tables. Comment lines are dropped, so that the driver's client-side
// interpolation (interpolateParams) counts only the real placeholders.
func loadMySQLStatements(table outbox.Table) statements {
	names := strings.NewReplacer("{{table}}", migrations.MySQLIdent(table),
		"{{jobs}}", migrations.MySQLRelated(table, "jobs"), "{{audit}}", migrations.MySQLRelated(table, "audit"))
	file := func(name string) string {
		b, err := mysqlFiles.ReadFile("sql/mysql/" + name + ".sql")
		if err != nil {
			panic(err) // embedded: a missing file is a build mistake
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "--") {
				lines = append(lines, l)
			}
		}
		return names.Replace(strings.Join(lines, "\n"))
	}
	return statements{
		now: file("now"), statesOf: file("states_of"),
		audit: file("audit"), auditAt: file("audit_at"), auditList: file("audit_list"),
		statusCounts: file("status_counts"), statusSent: file("status_sent"), statusHolders: file("status_holders"),
		statusSenders: file("status_senders"), statusSessions: file("status_sessions"), statusJobs: file("status_jobs"),
		failedList: file("failed_list"), failedCount: file("failed_count"), failedPick: file("failed_pick"),
		failedRetry: file("failed_retry"), failedPurge: file("failed_purge"),
		replayPick: file("replay_pick"), replay: file("replay"), replayCount: file("replay_count"),
	}
}

// placeholders is n comma-separated placeholders, or NULL for none (an
// IN list must not be empty; its part of the filter is off then).
func placeholders(n int) string {
	if n == 0 {
		return "NULL"
	}
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// expandIDs writes n placeholders for {{ids}} and m for {{topics}}.
func expandIDs(q string, n, m int) string {
	return strings.NewReplacer("{{ids}}", placeholders(n), "{{topics}}", placeholders(m)).Replace(q)
}

// mysqlFilter is a filter as the MySQL statements take it: the id and
// topic lists that {{ids}} and {{topics}} expand to, then the other
// parts, each given twice (tested for NULL, then compared).
type mysqlFilter struct {
	ids    [][]byte
	topics []string
	parts  []any
}

// newMySQLFilter returns the filter of canonical ids, topics and the
// other parts (nil pointers for the parts that are off).
func newMySQLFilter(ids, topics []string, parts ...any) mysqlFilter {
	f := mysqlFilter{ids: idBytes(ids), topics: topics}
	for _, p := range parts {
		if t, ok := p.(*time.Time); ok && t != nil {
			u := t.UTC()
			p = &u
		}
		f.parts = append(f.parts, p, p)
	}
	return f
}

// sql returns q with the lists expanded.
func (f mysqlFilter) sql(q string) string { return expandIDs(q, len(f.ids), len(f.topics)) }

// args returns the filter's parameters, in the order of the statements.
func (f mysqlFilter) args() []any {
	var args []any
	var on any
	if len(f.ids) > 0 {
		on = 1
	}
	args = append(args, on)
	for _, id := range f.ids {
		args = append(args, id)
	}
	on = nil
	if len(f.topics) > 0 {
		on = 1
	}
	args = append(args, on)
	for _, t := range f.topics {
		args = append(args, t)
	}
	return append(args, f.parts...)
}

// idBytes returns canonical UUIDs as the 16 bytes the table stores.
func idBytes(ids []string) [][]byte {
	out := make([][]byte, 0, len(ids))
	for _, s := range ids {
		u := uuid.MustParse(s) // canonical: parsed before
		out = append(out, u[:])
	}
	return out
}

// idString is a stored id as a canonical UUID.
func idString(b []byte) (string, error) {
	u, err := uuid.FromBytes(b)
	if err != nil {
		return "", fmt.Errorf("admin: an id of %d bytes: %w", len(b), err)
	}
	return u.String(), nil
}

// mysqlLimit is a LIMIT parameter: every row for 0 or less (MySQL's LIMIT
// takes no NULL).
func mysqlLimit(n int64) int64 {
	if n <= 0 {
		return math.MaxInt64
	}
	return n
}

// nullTime scans a DATETIME that may be NULL, whatever the driver's
// parseTime.
type nullTime struct{ migrations.MySQLTime }

// ptr returns the time, or nil for NULL.
func (t nullTime) ptr() *time.Time {
	if t.IsZero() {
		return nil
	}
	v := t.UTC()
	return &v
}

func (a *Admin) nowMySQL(ctx context.Context) (time.Time, error) {
	var now migrations.MySQLTime
	if err := a.my.QueryRowContext(ctx, a.q.now).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("admin: read the database clock: %w", err)
	}
	return now.UTC(), nil
}

// sqlQuerier is a *sql.DB or a *sql.Tx.
type sqlQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// statesMySQL returns the state of each of ids the table holds.
func (a *Admin) statesMySQL(ctx context.Context, q sqlQuerier, ids []string) (map[string]string, error) {
	state := map[string]string{}
	for len(ids) > 0 {
		n := min(len(ids), changeChunk)
		args := make([]any, 0, n)
		for _, b := range idBytes(ids[:n]) {
			args = append(args, b)
		}
		rows, err := q.QueryContext(ctx, expandIDs(a.q.statesOf, n, 0), args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id []byte
			var st string
			if err := rows.Scan(&id, &st); err != nil {
				rows.Close()
				return nil, err
			}
			s, err := idString(id)
			if err != nil {
				rows.Close()
				return nil, err
			}
			state[s] = st
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return state, nil
}

// skippedMySQL is skipped on MySQL.
func (a *Admin) skippedMySQL(ctx context.Context, q sqlQuerier, given, changed []string) ([]Skipped, error) {
	rest := notIn(given, changed)
	if len(rest) == 0 {
		return nil, nil
	}
	state, err := a.statesMySQL(ctx, q, rest)
	if err != nil {
		return nil, err
	}
	out := make([]Skipped, 0, len(rest))
	for _, id := range rest {
		out = append(out, Skipped{ID: id, State: state[id]})
	}
	return out, nil
}

// notIn returns the ids among given that are not in changed, each once.
func notIn(given, changed []string) []string {
	done := map[string]bool{}
	for _, id := range changed {
		done[id] = true
	}
	var rest []string
	for _, id := range given {
		if !done[id] {
			rest = append(rest, id)
			done[id] = true
		}
	}
	return rest
}

// dryRunMySQL is dryRun on MySQL.
func (a *Admin) dryRunMySQL(ctx context.Context, action string, n, limit int64, ids []string, want string) (Result, error) {
	res := Result{Action: action, DryRun: true, Rows: min(n, limitOr(limit, n))}
	if len(ids) == 0 {
		return res, nil
	}
	all, err := a.skippedMySQL(ctx, a.my, ids, nil)
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

// changeMySQL is change on MySQL: in one READ COMMITTED transaction, pick
// (with pickArgs) locks the rows to change and returns their ids, apply
// (applyArgs, then the ids of {{ids}}) changes them, a chunk at a time,
// left counts what the limit left, and the audit entry is written.
func (a *Admin) changeMySQL(ctx context.Context, action string, what any, ids []string, abort func(Result) error, left remainder,
	pick string, pickArgs []any, apply string, applyArgs ...any) (Result, error) {
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
	tx, err := a.my.BeginTx(ctx, changeTx)
	if err != nil {
		return res, fmt.Errorf("admin: %s: begin: %w", action, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	picked, err := pickIDs(ctx, tx, pick, pickArgs)
	if err != nil {
		return res, fmt.Errorf("admin: %s: lock the rows: %w", action, err)
	}
	for rest := picked; len(rest) > 0; {
		chunk := rest[:min(len(rest), changeChunk)]
		rest = rest[len(chunk):]
		args := append([]any{}, applyArgs...)
		for _, id := range chunk {
			args = append(args, id)
		}
		r, err := tx.ExecContext(ctx, expandIDs(apply, len(chunk), 0), args...)
		if err != nil {
			return res, fmt.Errorf("admin: %s: %w", action, err)
		}
		if n, err := r.RowsAffected(); err != nil {
			return res, fmt.Errorf("admin: %s: %w", action, err)
		} else if n != int64(len(chunk)) {
			// The rows are locked: this would be a bug, not a race.
			return res, fmt.Errorf("admin: %s: changed %d of %d locked rows; nothing was changed", action, n, len(chunk))
		}
	}
	for _, b := range picked {
		s, err := idString(b)
		if err != nil {
			return res, err
		}
		res.IDs = append(res.IDs, s)
	}
	res.Rows = int64(len(res.IDs))
	if len(ids) > 0 {
		if res.Skipped, err = a.skippedMySQL(ctx, tx, ids, res.IDs); err != nil {
			return res, fmt.Errorf("admin: %s: %w", action, err)
		}
	}
	if abort != nil {
		if err := abort(res); err != nil {
			return Result{Action: action, Skipped: res.Skipped}, err
		}
	}
	if left.limit > 0 && res.Rows == left.limit {
		if err := tx.QueryRowContext(ctx, left.count, left.args...).Scan(&res.Left); err != nil {
			return res, fmt.Errorf("admin: %s: count the rows left: %w", action, err)
		}
	}
	r, err := tx.ExecContext(ctx, a.q.audit, a.cfg.Actor, action, string(filter), res.Rows)
	if err == nil {
		res.AuditID, err = r.LastInsertId()
	}
	var at migrations.MySQLTime
	if err == nil {
		err = tx.QueryRowContext(ctx, a.q.auditAt, res.AuditID).Scan(&at)
	}
	if err != nil {
		return res, fmt.Errorf("admin: %s: write the audit entry: %w", action, err)
	}
	res.At = at.UTC()
	if err := tx.Commit(); err != nil {
		return res, fmt.Errorf("admin: %s: commit: %w", action, err)
	}
	a.log.Info("admin action", "action", action, "rows", res.Rows, "left", res.Left, "skipped", len(res.Skipped),
		"filter", json.RawMessage(filter), "audit_id", res.AuditID)
	return res, nil
}

// pickIDs runs a locking pick and returns the ids, in its order.
func pickIDs(ctx context.Context, tx *sql.Tx, q string, args []any) ([][]byte, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids [][]byte
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
