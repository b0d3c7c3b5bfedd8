package relay

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/relay/internal/pgstore"
)

// ConfigurePool sets the session settings the relay's statements are
// written for (plan_cache_mode=force_custom_plan, enable_bitmapscan=off,
// jit=off) on the connections of a pool built from cfg, leaving those the
// caller has set (in the URL or in cfg) alone. `relay run` applies it
// to its own pool; call it before pgxpool.NewWithConfig when the relay
// shares a pool of yours, or give the relay a pool of its own: the
// settings change how every statement on those connections is planned.
//
// Lock claims (ClaimLock) set them inside their own transactions whatever
// the pool; lease claims rely on the pool.
func ConfigurePool(cfg *pgxpool.Config) { pgstore.ConfigurePool(cfg) }
