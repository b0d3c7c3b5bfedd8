package relay

import (
	"errors"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

var (
	_ store.Store      = (*pgStore)(nil)
	_ store.Shards     = (*pgStore)(nil)
	_ store.LockClaims = (*pgStore)(nil)
	_ store.Listener   = (*pgStore)(nil)
	_ store.Vacuumer   = (*pgStore)(nil)
	_ store.Partitions = (*pgStore)(nil)
)

// ErrUnsupported is returned, wrapped, for what the relay offers on
// PostgreSQL only (ordered delivery, lock claims, partitioned tables)
// when it runs on another database.
var ErrUnsupported = errors.New("not supported on this database")
