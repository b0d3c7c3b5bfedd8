package admin

import (
	"context"
	"database/sql"
	"fmt"
)

// statusTx is Status's transaction on MySQL: one snapshot for every part.
var statusTx = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}

// statusMySQL is Status on MySQL: the counts, the sent rows, the holders,
// the recent senders and the jobs, in one read-only REPEATABLE READ
// transaction, and the sessions when the performance schema is on. MySQL
// has no ordered delivery or partitions.
func (a *Admin) statusMySQL(ctx context.Context, o StatusOptions) (*Status, error) {
	tx, err := a.my.BeginTx(ctx, statusTx)
	if err != nil {
		return nil, fmt.Errorf("admin: status: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read only: nothing to commit
	s := &Status{Table: a.Name(), SinkOutage: SinkOutageUnknown, Dialect: "mysql",
		Topics: []TopicCounts{}, Holders: []Holder{}, RecentSenders: []Sender{}, Sessions: []Session{}, Jobs: []Job{}}
	for _, part := range []struct {
		what string
		fn   func(context.Context, *sql.Tx, *Status, StatusOptions) error
	}{
		{"count rows", a.statusCountsMySQL}, {"count sent rows", a.statusSentMySQL},
		{"read holders", a.statusHoldersMySQL}, {"read recent senders", a.statusSendersMySQL},
		{"read sessions", a.statusSessionsMySQL}, {"read jobs", a.statusJobsMySQL},
	} {
		if err := part.fn(ctx, tx, s, o); err != nil {
			return nil, fmt.Errorf("admin: status: %s: %w", part.what, err)
		}
	}
	s.markServing()
	a.log.Debug("status read")
	return s, nil
}

// eachRow runs q and calls scan for each row.
func eachRow(ctx context.Context, tx *sql.Tx, q string, args []any, scan func(*sql.Rows) error) error {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (a *Admin) statusCountsMySQL(ctx context.Context, tx *sql.Tx, s *Status, _ StatusOptions) error {
	byTopic := map[string]int{} // index into s.Topics
	return eachRow(ctx, tx, a.q.statusCounts, nil, func(r *sql.Rows) error {
		var (
			state, topic string
			n, sub       int64
			age          *float64
		)
		if err := r.Scan(&state, &topic, &n, &sub, &age); err != nil {
			return err
		}
		s.addCounts(byTopic, state, topic, n, sub, age)
		return nil
	})
}

func (a *Admin) statusSentMySQL(ctx context.Context, tx *sql.Tx, s *Status, o StatusOptions) error {
	others := s.Totals.PendingDue + s.Totals.PendingDelayed + s.Totals.Processing + s.Totals.Failed
	limit := sentLimit(o)
	var counted int64
	var estimate *int64
	var schema *string
	if a.cfg.Table.Schema != "" {
		schema = &a.cfg.Table.Schema
	}
	var at, oldest nullTime
	err := tx.QueryRowContext(ctx, a.q.statusSent, limit, others, schema, a.cfg.Table.Name).Scan(&at, &counted, &estimate, &oldest)
	s.At, s.OldestSentAt = at.UTC(), oldest.ptr()
	s.Totals.setSent(counted, estimate, limit)
	return err
}

func (a *Admin) statusHoldersMySQL(ctx context.Context, tx *sql.Tx, s *Status, _ StatusOptions) error {
	return eachRow(ctx, tx, a.q.statusHolders, nil, func(r *sql.Rows) error {
		var h Holder
		if err := r.Scan(&h.Relay, &h.Rows, &h.Claims, &h.FirstLeaseEnd, &h.LastLeaseEnd); err != nil {
			return err
		}
		s.Holders = append(s.Holders, h)
		return nil
	})
}

func (a *Admin) statusSendersMySQL(ctx context.Context, tx *sql.Tx, s *Status, _ StatusOptions) error {
	return eachRow(ctx, tx, a.q.statusSenders, []any{a.cfg.RecentSent}, func(r *sql.Rows) error {
		var x Sender
		if err := r.Scan(&x.Relay, &x.Rows, &x.LastSentSeconds); err != nil {
			return err
		}
		s.RecentSenders = append(s.RecentSenders, x)
		return nil
	})
}

func (a *Admin) statusJobsMySQL(ctx context.Context, tx *sql.Tx, s *Status, _ StatusOptions) error {
	return eachRow(ctx, tx, a.q.statusJobs, nil, func(r *sql.Rows) error {
		var j Job
		if err := r.Scan(&j.Job, &j.LastRunBy, &j.Running, &j.NextRunSeconds,
			&j.LastStartedSeconds, &j.LastFinishedSeconds, &j.LastDeleted, &j.TotalDeleted); err != nil {
			return err
		}
		s.Jobs = append(s.Jobs, j)
		return nil
	})
}

// statusSessionsMySQL lists the relays connected, from the performance
// schema; when the server has it off, SessionsNote says so instead.
func (a *Admin) statusSessionsMySQL(ctx context.Context, tx *sql.Tx, s *Status, _ StatusOptions) error {
	var on bool
	if err := tx.QueryRowContext(ctx, "SELECT @@performance_schema").Scan(&on); err != nil {
		return err
	}
	if !on {
		s.SessionsNote = SessionsNoteMySQL
		return nil
	}
	var schema *string
	if a.cfg.Table.Schema != "" {
		schema = &a.cfg.Table.Schema
	}
	p := a.cfg.SessionPrefix
	return eachRow(ctx, tx, a.q.statusSessions, []any{p, p, p, schema}, func(r *sql.Rows) error {
		var c Session
		if err := r.Scan(&c.Relay, &c.Connections, &c.Clients); err != nil {
			return err
		}
		s.Sessions = append(s.Sessions, c)
		return nil
	})
}
