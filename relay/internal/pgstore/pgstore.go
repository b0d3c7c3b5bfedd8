package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// Store runs the relay's statements for one table on a pool.
type Store struct {
	pool  *pgxpool.Pool
	table outbox.Table
	lease time.Duration
	// all and topics name the ordered topics: every one, or those some
	// LIKE pattern of topics matches (store.OrderedTopics).
	all    bool
	topics []string
	shards int
	bounds store.Bounds
	q      statements
	// lockSettings opens a lock claim's transaction (lock.go).
	lockSettings string
	// shape caches whether the table is partitioned (isPartitioned).
	shape atomic.Pointer[bool]
}

// Config is what the store needs of the relay's configuration.
type Config struct {
	// Table is the outbox table.
	Table outbox.Table
	// Lease is how long a claim, a shard lease or a job run holds its rows,
	// its shard or its job.
	Lease time.Duration
	// Bounds bound what a claim reads.
	Bounds store.Bounds
	// Topics are the ordered topics, as topics or patterns ("*": every
	// one; none: ordering off), and Shards their shard count
	// (relay.Ordering).
	Topics []string
	Shards int
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.Shards     = (*Store)(nil)
	_ store.LockClaims = (*Store)(nil)
	_ store.Listener   = (*Store)(nil)
	_ store.Vacuumer   = (*Store)(nil)
	_ store.Partitions = (*Store)(nil)
)

// New returns the store of cfg.Table on pool.
func New(pool *pgxpool.Pool, cfg Config) *Store {
	all, topics := store.OrderedTopics(cfg.Topics)
	return &Store{
		pool: pool, table: cfg.Table, lease: cfg.Lease, bounds: cfg.Bounds,
		all: all, topics: topics, shards: cfg.Shards,
		q: loadStatements(cfg.Table, nil),
		// The server ends a session idle this long in a lock claim's
		// transaction, which is the claim's lease, and its statements are
		// planned as ConfigurePool's would be.
		lockSettings: localSettings(pool.Config().ConnConfig.RuntimeParams,
			map[string]string{"idle_in_transaction_session_timeout": fmt.Sprint(cfg.Lease.Milliseconds())}),
	}
}

// UnsetSessionSettings names the sessionSettings that s's pool does not
// set, sorted: relay.Run warns of them.
func (s *Store) UnsetSessionSettings() []string {
	return slices.Sorted(maps.Keys(unsetSettings(s.pool.Config().ConnConfig.RuntimeParams)))
}

// isPartitioned reports whether the table is partitioned. It looks the
// table up once: a table is created partitioned or not and stays so.
func (s *Store) isPartitioned(ctx context.Context) (bool, error) {
	if p := s.shape.Load(); p != nil {
		return *p, nil
	}
	partitioned, err := migrations.IsPartitioned(ctx, s.pool, s.table)
	if err != nil {
		return false, err
	}
	s.shape.Store(&partitioned)
	return partitioned, nil
}

// Ready checks that the database answers and the table's schema is the
// one this relay needs.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return err
	}
	return migrations.Check(ctx, s.pool, s.table)
}

// Fatal reports errors that retrying cannot fix: a missing or newer schema,
// an invalid name, and server answers about access or authentication.
func (s *Store) Fatal(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		class := pgErr.Code[:2]
		return class == "28" || class == "42" || class == "3D" || class == "3F"
	}
	return errors.Is(err, migrations.ErrNotMigrated) || errors.Is(err, migrations.ErrSchemaTooNew) ||
		errors.Is(err, outbox.ErrInvalidIdentifier)
}

// Listen connects outside the pool, LISTENs on the table's channel
// (migration 003) and calls notified for every notification, until the
// connection fails or ctx ends; connected runs once the LISTEN took effect.
func (s *Store) Listen(ctx context.Context, connected, notified func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.table.Channel()}.Sanitize()); err != nil {
		return err
	}
	connected()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		notified()
	}
}
