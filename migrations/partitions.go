package migrations

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// A partitioned outbox table (Options.PartitionInterval) is partitioned by
// range of id. Ids are UUIDv7: their first 48 bits are the Unix time in
// milliseconds at which the writer (or the column default) made them, so
// the partition bounded by the ids of two instants holds exactly the
// events made between them. A DEFAULT partition takes any other id.

// MinPartitionInterval is the shortest partition interval accepted.
const MinPartitionInterval = time.Second

// PartitionsAhead is how many intervals past the current one `relay
// migrate up` creates partitions for; the relays' partitions job keeps at
// least as many ready.
const PartitionsAhead = 3

// ErrNoPartitions means a partitioned table has no range partition left to
// take the interval from: create one with `relay migrate up
// --partition-interval`.
var ErrNoPartitions = errors.New("partitioned outbox table has no range partition; run `relay migrate up --partition-interval`")

// Partition is one range partition of a partitioned outbox table: the
// events whose ids were made from From up to, not including, To.
type Partition struct {
	// Name is the partition's table name, in the outbox table's schema.
	Name string
	// From and To bound the times the ids were made.
	From, To time.Time
}

// Lower and Upper are the partition's bounds as ids.
func (p Partition) Lower() uuid.UUID { return BoundID(p.From) }

// Upper is the first id past the partition; see Lower.
func (p Partition) Upper() uuid.UUID { return BoundID(p.To) }

// BoundID is the smallest id made at t or later: t's milliseconds in the
// first 48 bits, zeros after them.
func BoundID(t time.Time) uuid.UUID {
	var id uuid.UUID
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(id[:6], ms[2:])
	return id
}

// timeOfBound is BoundID's inverse for a bound's first 48 bits.
func timeOfBound(id uuid.UUID) time.Time {
	var ms [8]byte
	copy(ms[2:], id[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(ms[:]))).UTC()
}

func checkInterval(d time.Duration) error {
	if d < MinPartitionInterval || d%time.Second != 0 {
		return fmt.Errorf("migrations: partition interval %v must be a whole number of seconds, at least %v", d, MinPartitionInterval)
	}
	return nil
}

// IsPartitioned reports whether table exists and is partitioned.
func IsPartitioned(ctx context.Context, q Querier, table outbox.Table) (bool, error) {
	var p bool
	err := q.QueryRow(ctx, "SELECT coalesce((SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass($1)), false)", table.Ident()).Scan(&p)
	if err != nil {
		return false, fmt.Errorf("migrations: look up %s: %w", table, err)
	}
	return p, nil
}

var boundRE = regexp.MustCompile(`^FOR VALUES FROM \('([0-9a-f-]{36})'\) TO \('([0-9a-f-]{36})'\)$`)

// Partitions lists the range partitions of table, oldest first; the
// DEFAULT partition is not among them.
func Partitions(ctx context.Context, q Querier, table outbox.Table) ([]Partition, error) {
	rows, err := q.Query(ctx, `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass`, table.Ident())
	if err != nil {
		return nil, fmt.Errorf("migrations: list partitions of %s: %w", table, err)
	}
	var parts []Partition
	for rows.Next() {
		var name, bound string
		if err := rows.Scan(&name, &bound); err != nil {
			return nil, fmt.Errorf("migrations: list partitions of %s: %w", table, err)
		}
		m := boundRE.FindStringSubmatch(bound)
		if m == nil {
			continue // the DEFAULT partition
		}
		lo, err1 := uuid.Parse(m[1])
		hi, err2 := uuid.Parse(m[2])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("migrations: partition %s of %s: bound %q: %w", name, table, bound, err)
		}
		parts = append(parts, Partition{Name: name, From: timeOfBound(lo), To: timeOfBound(hi)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: list partitions of %s: %w", table, err)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].From.Before(parts[j].From) })
	return parts, nil
}

// DefaultPartition returns the name of table's DEFAULT partition (a table
// in the same schema); ok is false when it has none.
func DefaultPartition(ctx context.Context, q Querier, table outbox.Table) (name string, ok bool, err error) {
	err = q.QueryRow(ctx, `SELECT c.relname FROM pg_partitioned_table pt JOIN pg_class c ON c.oid = pt.partdefid
WHERE pt.partrelid = $1::regclass`, table.Ident()).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("migrations: look up the default partition of %s: %w", table, err)
	}
	return name, true, nil
}

// CreatePartitions creates, in tx, the partitions of table missing between
// the start of the current interval and ahead past now (the database's
// clock), one per interval, aligned to multiples of interval since the
// Unix epoch. interval 0 takes the width of the newest partition
// (ErrNoPartitions when there is none). A partition never overlaps an
// existing one: a period some partition already covers in part starts
// where that one ends. It returns the partitions it created.
//
// Each partition is created apart and then attached, which takes a SHARE
// UPDATE EXCLUSIVE lock on the table (readers and writers go on) and an
// ACCESS EXCLUSIVE lock on the DEFAULT partition while PostgreSQL checks
// that none of its rows belongs to the new range. When some do (no relay
// created partitions for a while, so their events went to the DEFAULT
// partition), that period is left to the DEFAULT partition and the next
// one is tried. The SHARE UPDATE EXCLUSIVE lock is taken first: a new
// partition's primary key gets the fillfactor of the newest partition's,
// so that partitions follow PrepareOrdered.
func CreatePartitions(ctx context.Context, tx pgx.Tx, table outbox.Table, interval, ahead time.Duration) ([]Partition, error) {
	table = table.WithDefaults()
	if err := lockPartitions(ctx, tx, table); err != nil {
		return nil, err
	}
	existing, err := Partitions(ctx, tx, table)
	if err != nil {
		return nil, err
	}
	fillfactor, err := newKeyFillfactor(ctx, tx, table, existing)
	if err != nil {
		return nil, err
	}
	if interval == 0 {
		if len(existing) == 0 {
			return nil, fmt.Errorf("table %s: %w", table, ErrNoPartitions)
		}
		newest := existing[len(existing)-1]
		interval = newest.To.Sub(newest.From)
	}
	if err := checkInterval(interval); err != nil {
		return nil, err
	}
	var now time.Time
	if err := tx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		return nil, fmt.Errorf("migrations: read the clock: %w", err)
	}
	cursor := now.Truncate(interval)
	end := now.Add(ahead)
	var created []Partition
	for cursor.Before(end) {
		next := cursor.Truncate(interval).Add(interval)
		p := Partition{From: cursor, To: next}
		if o, ok := overlap(existing, p); ok {
			cursor = o.To
			continue
		}
		p.Name = table.Name + "_p" + p.From.UTC().Format("20060102t150405")
		ok, err := attach(ctx, tx, table, p, fillfactor)
		if err != nil {
			return created, err
		}
		if ok {
			created = append(created, p)
			existing = append(existing, p)
		}
		cursor = next
	}
	return created, nil
}

// overlap returns an existing partition that overlaps p.
func overlap(existing []Partition, p Partition) (Partition, bool) {
	for _, e := range existing {
		if e.From.Before(p.To) && p.From.Before(e.To) {
			return e, true
		}
	}
	return Partition{}, false
}

// attach creates p and attaches it to table, in a savepoint, with its
// primary key at fillfactor (0: PostgreSQL's default); ok is false when
// rows of the DEFAULT partition belong to p's range, and nothing is
// created.
func attach(ctx context.Context, tx pgx.Tx, table outbox.Table, p Partition, fillfactor int) (ok bool, err error) {
	name := pgx.Identifier{table.Schema, p.Name}.Sanitize()
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("migrations: create partition %s: %w", name, err)
	}
	defer sp.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	// The attach adopts this primary key for the table's: one it made
	// would take the default fillfactor, as the table's partitioned key
	// has it (PostgreSQL does not let one alter that).
	key := "ALTER TABLE " + name + " ADD PRIMARY KEY (id)"
	if fillfactor > 0 {
		key += fmt.Sprintf(" WITH (fillfactor = %d)", fillfactor)
	}
	stmts := []string{
		"CREATE TABLE " + name + " (LIKE " + table.Ident() + " INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED)",
		key,
		fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')", table.Ident(), name, p.Lower(), p.Upper()),
	}
	for _, stmt := range stmts {
		if _, err := sp.Exec(ctx, stmt); err != nil {
			var pgErr interface{ SQLState() string }
			if errors.As(err, &pgErr) && pgErr.SQLState() == "23514" { // check_violation: rows in DEFAULT
				return false, nil
			}
			return false, fmt.Errorf("migrations: create partition %s: %w", name, err)
		}
	}
	if err := sp.Commit(ctx); err != nil {
		return false, fmt.Errorf("migrations: create partition %s: %w", name, err)
	}
	return true, nil
}

// createPartitions is what UpWith runs for a table it created.
func createPartitions(ctx context.Context, tx pgx.Tx, table outbox.Table, interval time.Duration) ([]Partition, error) {
	return CreatePartitions(ctx, tx, table, interval, PartitionsAhead*interval+interval)
}

// DropPartition drops p from table in tx if every row in it is sent, and
// sent before cutoff; dropped is false, and nothing changes, otherwise.
// rows is the statistics system's count of its live rows
// (pg_stat_user_tables.n_live_tup), which needs no scan. It first takes an
// ACCESS EXCLUSIVE lock on table (PostgreSQL needs one to drop a
// partition): set a lock_timeout on tx, since writers and relays queue
// behind the lock while it waits. The checks run under the lock, so that
// no row of p can change between them and the drop; they read the
// partition's partial indexes, never its heap. The dedup keys of p's rows
// go with it.
func DropPartition(ctx context.Context, tx pgx.Tx, table outbox.Table, p Partition, cutoff time.Time) (dropped bool, rows int64, err error) {
	table = table.WithDefaults()
	name := pgx.Identifier{table.Schema, p.Name}.Sanitize()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+table.Ident()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return false, 0, fmt.Errorf("migrations: lock %s to drop %s: %w", table, name, err)
	}
	var kept bool
	var est int64
	err = tx.QueryRow(ctx, `SELECT
    EXISTS (SELECT 1 FROM `+name+` WHERE status = 'pending')
    OR EXISTS (SELECT 1 FROM `+name+` WHERE status = 'processing')
    OR EXISTS (SELECT 1 FROM `+name+` WHERE status = 'failed')
    OR coalesce((SELECT max(sent_at) FROM `+name+` WHERE status = 'sent') >= $1, false),
    coalesce((SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = $2::regclass), 0)`, cutoff, name).Scan(&kept, &est)
	if err != nil {
		return false, 0, fmt.Errorf("migrations: check partition %s: %w", name, err)
	}
	if kept {
		return false, 0, nil
	}
	if _, err := tx.Exec(ctx, "DELETE FROM "+table.Related("dedup")+" WHERE id >= $1 AND id < $2", p.Lower(), p.Upper()); err != nil {
		return false, 0, fmt.Errorf("migrations: drop dedup keys of %s: %w", name, err)
	}
	if _, err := tx.Exec(ctx, "DROP TABLE "+name); err != nil {
		return false, 0, fmt.Errorf("migrations: drop partition %s: %w", name, err)
	}
	return true, est, nil
}
