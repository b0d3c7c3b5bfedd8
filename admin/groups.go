package admin

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// FailureGroup is the failed rows of one Fingerprint: same topic, same
// ErrorClass and same Pattern of last_error.
type FailureGroup struct {
	Fingerprint string `json:"fingerprint"`
	Topic       string `json:"topic"`
	Class       string `json:"class"`
	// Pattern is the rows' last_error with ids, numbers and quoted values
	// replaced (see Pattern).
	Pattern string `json:"pattern"`
	Count   int64  `json:"count"`
	// FirstFailed and LastFailed bound when its rows failed: failed_at,
	// or created_at for rows that failed before migration 007.
	FirstFailed time.Time `json:"first_failed"`
	LastFailed  time.Time `json:"last_failed"`
	// Sample is one of its rows (the one that failed last), without key,
	// headers or payload.
	Sample FailedRow `json:"sample"`
}

// groupPage is how many failed rows FailureGroups reads per statement.
const groupPage = 1000

// FailureGroups returns the groups of the failed rows f matches, the
// largest first (then by fingerprint). It reads every such row's id,
// topic, error and times, never its payload, a page at a time through
// ListFailed, so memory grows with the number of groups, not of rows.
// The pages are separate statements: rows failing or leaving meanwhile
// may be counted or not.
func (a *Admin) FailureGroups(ctx context.Context, f Filter) ([]FailureGroup, error) {
	by := map[string]*FailureGroup{}
	err := a.eachFailed(ctx, f, func(r FailedRow, fp string) {
		at := r.CreatedAt
		if r.FailedAt != nil {
			at = *r.FailedAt
		}
		g := by[fp]
		if g == nil {
			g = &FailureGroup{Fingerprint: fp, Topic: r.Topic, Class: ErrorClass(r.LastError), Pattern: Pattern(r.LastError),
				FirstFailed: at, LastFailed: at}
			by[fp] = g
		}
		g.Count++
		if at.Before(g.FirstFailed) {
			g.FirstFailed = at
		}
		if g.Count == 1 || !at.Before(g.LastFailed) {
			g.LastFailed = at
			g.Sample = FailedRow{ID: r.ID, Topic: r.Topic, Attempt: r.Attempt, LastError: r.LastError,
				CreatedAt: r.CreatedAt, FailedAt: r.FailedAt, PayloadSize: r.PayloadSize}
		}
	})
	if err != nil {
		return nil, err
	}
	groups := make([]FailureGroup, 0, len(by))
	for _, g := range by {
		groups = append(groups, *g)
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].Count != groups[j].Count {
			return groups[i].Count > groups[j].Count
		}
		return groups[i].Fingerprint < groups[j].Fingerprint
	})
	return groups, nil
}

// eachFailed calls fn with each failed row f matches, without payload,
// and its fingerprint; with f.Group, only the rows of that group.
func (a *Admin) eachFailed(ctx context.Context, f Filter, fn func(FailedRow, string)) error {
	group := strings.ToLower(f.Group)
	if err := checkGroup(group); err != nil {
		return err
	}
	f.Group = ""
	after := ""
	for {
		rows, next, err := a.ListFailed(ctx, f, Page{After: after, Limit: groupPage})
		if err != nil {
			return err
		}
		for _, r := range rows {
			if fp := Fingerprint(r.Topic, r.LastError); group == "" || fp == group {
				fn(r, fp)
			}
		}
		if next == "" {
			return nil
		}
		after = next
	}
}

// fingerprintRe is what Fingerprint returns.
var fingerprintRe = regexp.MustCompile(`^[0-9a-f]{16}$`)

// IsFingerprint reports whether s is a failure group's fingerprint, as
// Fingerprint returns it (16 hex digits, in any case).
func IsFingerprint(s string) bool { return fingerprintRe.MatchString(strings.ToLower(s)) }

// checkGroup reports whether g is a fingerprint (or empty).
func checkGroup(g string) error {
	if g != "" && !IsFingerprint(g) {
		return fmt.Errorf("admin: %q is not a failure group (16 hex digits, as FailureGroups gives)", g)
	}
	return nil
}

// resolveGroup returns f with its Group replaced by the ids of the rows
// that are in it now (within f's other parts), and false if there are
// none: the statements then select by id. This is safe for an action: its
// statement still changes only the rows among those ids that are failed
// when it locks them, the first ActionOptions.Limit in id order, so the
// count an operator confirmed stays the most that changes. Rows that
// joined the group since the count was shown are among the ids, beyond
// the limit: Result.Left counts them. One that fails during the action
// itself is not among them and is left alone, uncounted.
func (a *Admin) resolveGroup(ctx context.Context, f Filter) (Filter, bool, error) {
	if f.Group == "" {
		return f, true, nil
	}
	var ids []string
	if err := a.eachFailed(ctx, f, func(r FailedRow, _ string) { ids = append(ids, r.ID) }); err != nil {
		return f, false, err
	}
	f.IDs, f.Group = ids, ""
	return f, len(ids) > 0, nil
}
