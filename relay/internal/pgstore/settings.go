package pgstore

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// sessionSettings are the PostgreSQL settings the relay's statements are
// planned best under. Each is a short statement repeated hundreds of times
// a second against a table whose size and dead tuples change all the time:
//
//   - plan_cache_mode=force_custom_plan: a prepared statement's generic
//     plan is made once, often while the table is nearly empty, and kept
//     as the table grows. A record UPDATE by id planned as a sequential scan
//     of an empty table went on scanning the whole table once it held many
//     rows (docs/benchmarks.md).
//   - enable_bitmapscan=off: a bitmap scan reads every entry of a partial
//     index, dead ones too, and never marks them dead, so a claim or record
//     that chose one grew slower with every event until the next VACUUM.
//     A plain index scan in index order stops after the rows it needs and
//     marks the dead entries it passes, so the next scan skips them.
//   - jit=off: compiling a plan costs milliseconds; these statements run in
//     less.
var sessionSettings = map[string]string{
	"plan_cache_mode":   "force_custom_plan",
	"enable_bitmapscan": "off",
	"jit":               "off",
}

// ConfigurePool sets the sessionSettings that cfg does not set on the
// connections of a pool built from cfg (relay.ConfigurePool).
func ConfigurePool(cfg *pgxpool.Config) {
	maps.Copy(cfg.ConnConfig.RuntimeParams, unsetSettings(cfg.ConnConfig.RuntimeParams))
}

// unsetSettings returns the sessionSettings that params does not set.
func unsetSettings(params map[string]string) map[string]string {
	out := map[string]string{}
	for name, value := range sessionSettings {
		if _, set := params[name]; !set {
			out[name] = value
		}
	}
	return out
}

// localSettings returns a statement that applies sessionSettings, but for
// those params sets, and the extra settings to the current transaction
// only.
func localSettings(params map[string]string, extra map[string]string) string {
	all := unsetSettings(params)
	maps.Copy(all, extra)
	var calls []string
	for _, name := range slices.Sorted(maps.Keys(all)) {
		calls = append(calls, fmt.Sprintf("set_config('%s', '%s', true)", name, all[name]))
	}
	return "SELECT " + strings.Join(calls, ", ")
}
