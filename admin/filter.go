package admin

import (
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// TimeRange bounds a timestamp column: From included, To excluded; a zero
// bound is open.
type TimeRange struct {
	From time.Time
	To   time.Time
}

// IsZero reports whether neither bound is set.
func (r TimeRange) IsZero() bool { return r.From.IsZero() && r.To.IsZero() }

func (r TimeRange) params() (from, to *time.Time) {
	if !r.From.IsZero() {
		from = &r.From
	}
	if !r.To.IsZero() {
		to = &r.To
	}
	return from, to
}

// jsonRange is a TimeRange in the audit trail.
type jsonRange struct {
	From *time.Time `json:"from,omitempty"`
	To   *time.Time `json:"to,omitempty"`
}

func (r TimeRange) describe() *jsonRange {
	if r.IsZero() {
		return nil
	}
	from, to := r.params()
	return &jsonRange{From: from, To: to}
}

// Filter selects failed rows. Its parts combine with AND; an empty part
// selects everything.
type Filter struct {
	// IDs are event ids (UUIDs).
	IDs []string
	// Topics match exactly.
	Topics []string
	// Created bounds created_at.
	Created TimeRange
	// Failed bounds failed_at, when the relay marked the row failed
	// (migration 007; rows that failed before it have none and never
	// match a Failed range).
	Failed TimeRange
	// ErrorContains is text that last_error contains, in any case; no
	// wildcards.
	ErrorContains string
	// Group is a failure group's Fingerprint (FailureGroups): only its
	// rows. Each call resolves it to the ids of its rows at that moment,
	// which then travel as an id list (on MySQL, at most 65,535).
	Group string
	// All lets RetryFailed and PurgeFailed act on every failed row when
	// nothing else is set; without it they refuse (ErrNoFilter).
	All bool
}

// empty reports whether no part selects anything.
func (f Filter) empty() bool {
	return len(f.IDs) == 0 && len(f.Topics) == 0 && f.Created.IsZero() && f.Failed.IsZero() && f.ErrorContains == "" && f.Group == ""
}

// Bulk reports whether an action with this filter may change more than
// one row: anything but a single id.
func (f Filter) Bulk() bool {
	return !(len(f.IDs) == 1 && len(f.Topics) == 0 && f.Created.IsZero() && f.Failed.IsZero() && f.ErrorContains == "" && f.Group == "")
}

// params returns $1-$7 of the failed_*.sql statements (Group is resolved
// apart, by resolveGroup).
func (f Filter) params() ([]any, error) {
	if err := checkGroup(strings.ToLower(f.Group)); err != nil {
		return nil, err
	}
	ids, err := canonicalIDs(f.IDs)
	if err != nil {
		return nil, err
	}
	var topics []string
	if len(f.Topics) > 0 {
		topics = f.Topics
	}
	cFrom, cTo := f.Created.params()
	fFrom, fTo := f.Failed.params()
	var errText *string
	if f.ErrorContains != "" {
		errText = &f.ErrorContains
	}
	return []any{ids, topics, cFrom, cTo, fFrom, fTo, errText}, nil
}

// describe is the filter as the audit trail records it.
func (f Filter) describe() map[string]any {
	d := map[string]any{}
	if len(f.IDs) > 0 {
		ids, _ := canonicalIDs(f.IDs)
		d["ids"] = ids
	}
	if len(f.Topics) > 0 {
		d["topics"] = f.Topics
	}
	if r := f.Created.describe(); r != nil {
		d["created"] = r
	}
	if r := f.Failed.describe(); r != nil {
		d["failed"] = r
	}
	if f.ErrorContains != "" {
		d["error_contains"] = f.ErrorContains
	}
	if f.Group != "" {
		d["group"] = strings.ToLower(f.Group)
	}
	if f.All {
		d["all"] = true
	}
	return d
}

// ReplayFilter selects sent rows for Replay: by IDs, or by Topics and at
// least one bound of Created or Sent (a replay of a whole topic, or of
// every topic, must say over which time).
type ReplayFilter struct {
	IDs     []string
	Topics  []string
	Created TimeRange
	// Sent bounds sent_at, which sent_idx (migration 004) orders: the
	// cheapest range to replay by.
	Sent TimeRange
}

// Bulk reports whether the replay may change more than one row.
func (f ReplayFilter) Bulk() bool {
	return !(len(f.IDs) == 1 && len(f.Topics) == 0 && f.Created.IsZero() && f.Sent.IsZero())
}

func (f ReplayFilter) validate() error {
	if len(f.IDs) == 0 && (len(f.Topics) == 0 || f.Created.IsZero() && f.Sent.IsZero()) {
		return fmt.Errorf("admin: replay needs ids, or topics and a time range (created or sent): %w", ErrNoFilter)
	}
	return nil
}

// params returns $1-$6 of replay.sql and replay_count.sql.
func (f ReplayFilter) params() ([]any, error) {
	ids, err := canonicalIDs(f.IDs)
	if err != nil {
		return nil, err
	}
	var topics []string
	if len(f.Topics) > 0 {
		topics = f.Topics
	}
	cFrom, cTo := f.Created.params()
	sFrom, sTo := f.Sent.params()
	return []any{ids, topics, cFrom, cTo, sFrom, sTo}, nil
}

func (f ReplayFilter) describe() map[string]any {
	d := map[string]any{}
	if len(f.IDs) > 0 {
		ids, _ := canonicalIDs(f.IDs)
		d["ids"] = ids
	}
	if len(f.Topics) > 0 {
		d["topics"] = f.Topics
	}
	if r := f.Created.describe(); r != nil {
		d["created"] = r
	}
	if r := f.Sent.describe(); r != nil {
		d["sent"] = r
	}
	return d
}

// canonicalIDs parses ids as UUIDs and returns them in canonical form,
// each once, or nil for none.
func canonicalIDs(ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(ids))
	for _, s := range ids {
		u, err := uuid.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("admin: %q is not an event id (a UUID): %w", s, err)
		}
		if c := u.String(); !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out, nil
}

// limitParam is a LIMIT parameter: NULL (all rows) for 0 or less.
func limitParam(n int64) *int64 {
	if n <= 0 {
		return nil
	}
	return &n
}

// mysql returns the filter of the failed_*.sql statements of MySQL.
func (f Filter) mysql() mysqlFilter {
	ids, _ := canonicalIDs(f.IDs) // validated by params
	cFrom, cTo := f.Created.params()
	fFrom, fTo := f.Failed.params()
	var errText *string
	if f.ErrorContains != "" {
		errText = &f.ErrorContains
	}
	return newMySQLFilter(ids, f.Topics, cFrom, cTo, fFrom, fTo, errText)
}

// mysql returns the filter of replay_pick.sql and replay_count.sql of
// MySQL.
func (f ReplayFilter) mysql() mysqlFilter {
	ids, _ := canonicalIDs(f.IDs) // validated by params
	cFrom, cTo := f.Created.params()
	sFrom, sTo := f.Sent.params()
	return newMySQLFilter(ids, f.Topics, cFrom, cTo, sFrom, sTo)
}
