package bench

import (
	"context"
	"fmt"
)

// burnDownMySQL is burn-down on MySQL or MariaDB: the steps of burnDown
// with the MySQL statements of mysql.go. The events are pre-written by
// the Writer through outbox.FromMySQL, ANALYZE TABLE stands for VACUUM
// ANALYZE, and the drain time runs from UTC_TIMESTAMP(6) read just
// before the relays start to the last sent_at. What needs PostgreSQL's
// statistics views is left out: no pg_stat_activity sampling (Claim comes
// from the relays' observer events; MarkSent and OldestXactSeconds are
// null), no backend CPU (null), and TableStats has the sizes only (the
// dead tuple and autovacuum counts stay 0).
func (r *runner) burnDownMySQL(ctx context.Context) error {
	fmt.Fprintf(r.cfg.Progress, "burn-down: %d relays: writing %d events\n", r.relays, r.cfg.Events)
	ids, err := prewriteMySQL(ctx, r.my, r.table, r.topic, r.cfg.Events, r.cfg.PayloadBytes)
	if err != nil {
		return err
	}
	if r.res.Table.SizeBeforeBytes, err = mysqlTableSize(ctx, r.my, r.table); err != nil {
		return err
	}
	start, err := mysqlClock(ctx, r.my)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.cfg.Progress, "burn-down: %d relays: draining\n", r.relays)
	if err := r.startRelays(); err != nil {
		return err
	}
	defer r.abort()
	if err := r.awaitDrained(ctx); err != nil {
		return err
	}
	if err := r.stopRelays(ctx); err != nil {
		return err
	}
	end, err := mysqlLastSent(ctx, r.my, r.table)
	if err != nil {
		return err
	}
	r.res.Events, r.res.Seconds = len(ids), end.Sub(start).Seconds()
	r.res.EventsPerSecond = float64(len(ids)) / r.res.Seconds
	counts, err := mysqlStatusCounts(ctx, r.my, r.table)
	if err != nil {
		return err
	}
	r.res.Sent = counts["sent"]
	if err := r.readBack(ctx, ids); err != nil {
		return err
	}
	r.res.Table.SizeAfterBytes, err = mysqlTableSize(ctx, r.my, r.table)
	return err
}
