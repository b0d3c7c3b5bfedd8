package admin_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/admin"
)

// table is what the failure group tests need of a bundle, on PostgreSQL
// or MySQL.
type table interface {
	put(t *testing.T, rows ...row) []string
	state(t *testing.T, id string) (status string, attempt int, lastError string)
	audit(t *testing.T) []auditEntry
}

func TestFailureGroups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testFailureGroups(t, b.ctx, b.adm, b)
}

func TestMySQLFailureGroups(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	testFailureGroups(t, b.ctx, b.adm, b)
}

// testFailureGroups groups failed rows whose errors differ only in ids
// and numbers, splits them by topic and cause, and retries and purges one
// group within a confirmed count.
func testFailureGroups(t *testing.T, ctx context.Context, adm *admin.Admin, b table) {
	timeout := func(n int) string {
		return fmt.Sprintf("attempt %d of %d: webhook: POST http://10.0.0.%d:8080/hooks: event 0191f2a4-7c3e-7b21-9a4f-2f5d9c1e8a%02d: timed out (%ds)", n, n, n, n, n)
	}
	const noRoute = `permanent: no route for the topic "orders": add a --route rule for it (or a catch-all "*=SINK")`
	ids := b.put(t,
		row{topic: "orders", status: "failed", lastError: timeout(5), created: ago(5 * time.Hour)}, // failed before migration 007
		row{topic: "orders", status: "failed", lastError: timeout(6), failed: ago(3 * time.Hour)},
		row{topic: "payments", status: "failed", lastError: timeout(5), failed: ago(3 * time.Hour)},
		row{topic: "orders", status: "failed", lastError: timeout(7), failed: ago(1 * time.Hour)},
		row{topic: "orders", status: "failed", lastError: noRoute, failed: ago(2 * time.Hour)},
		row{topic: "orders", status: "pending", lastError: timeout(5)},
		row{topic: "orders", status: "failed", lastError: timeout(12), failed: ago(2 * time.Hour)},
		row{topic: "payments", status: "failed", lastError: timeout(9), failed: ago(2 * time.Hour)},
	)
	failed := map[string]admin.FailedRow{}
	rows, _, err := adm.ListFailed(ctx, admin.Filter{}, admin.Page{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		failed[r.ID] = r
	}

	groups, err := adm.FailureGroups(ctx, admin.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	type shape struct {
		topic, class string
		count        int64
	}
	var got []shape
	for _, g := range groups {
		got = append(got, shape{g.Topic, g.Class, g.Count})
	}
	want := []shape{{"orders", "exhausted", 4}, {"payments", "exhausted", 2}, {"orders", "permanent", 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("groups = %+v, want %+v", got, want)
	}
	g := groups[0]
	if g.Fingerprint != admin.Fingerprint("orders", timeout(5)) || g.Pattern != admin.Pattern(timeout(99)) ||
		g.Pattern != "attempt <n> of <n>: webhook: POST http://<addr>/hooks: event <id>: timed out (<n>)" {
		t.Errorf("group = %+v", g)
	}
	// First: the row without failed_at, by its created_at; last and the
	// sample: the one that failed an hour ago.
	if !g.FirstFailed.Equal(failed[ids[0]].CreatedAt) || !g.LastFailed.Equal(*failed[ids[3]].FailedAt) ||
		g.Sample.ID != ids[3] || g.Sample.LastError != timeout(7) || g.Sample.Payload != nil {
		t.Errorf("group times and sample = %v, %v, %+v; rows %+v", g.FirstFailed, g.LastFailed, g.Sample, failed)
	}
	if only, err := adm.FailureGroups(ctx, admin.Filter{Topics: []string{"payments"}}); err != nil || len(only) != 1 || only[0].Count != 2 {
		t.Errorf("groups of payments = %+v, %v", only, err)
	}

	group := admin.Filter{Group: g.Fingerprint}
	if n, err := adm.CountFailed(ctx, group); err != nil || n != 4 {
		t.Errorf("count of the group = %d, %v; want 4", n, err)
	}
	if list, _, err := adm.ListFailed(ctx, group, admin.Page{Limit: 3}); err != nil || len(list) != 3 || list[0].ID != ids[0] || list[2].ID != ids[3] {
		t.Errorf("list of the group = %+v, %v", list, err)
	}
	res, err := adm.RetryFailed(ctx, group, admin.ActionOptions{DryRun: true})
	if err != nil || !res.DryRun || res.Rows != 4 {
		t.Errorf("dry run = %+v, %v; want 4 rows", res, err)
	}
	// 2 confirmed: the first two of the group in id order change; the
	// other topics and causes do not.
	res, err = adm.RetryFailed(ctx, group, admin.ActionOptions{Limit: 2})
	if err != nil || res.Rows != 2 || !slices.Equal(res.IDs, []string{ids[0], ids[1]}) || res.Left != 2 || len(res.Skipped) != 0 {
		t.Fatalf("retry of the group, limit 2 = %+v, %v", res, err)
	}
	wantState := []string{"pending", "pending", "failed", "failed", "failed", "pending", "failed", "failed"}
	for i, id := range ids {
		if st, _, _ := b.state(t, id); st != wantState[i] {
			t.Errorf("row %d = %s, want %s", i, st, wantState[i])
		}
	}
	res, err = adm.PurgeFailed(ctx, group, admin.ActionOptions{})
	if err != nil || res.Rows != 2 || !slices.Equal(res.IDs, []string{ids[3], ids[6]}) {
		t.Fatalf("purge of the rest of the group = %+v, %v", res, err)
	}
	// Now empty: nothing changes and no audit entry is written.
	if res, err = adm.PurgeFailed(ctx, group, admin.ActionOptions{}); err != nil || res.Rows != 0 {
		t.Errorf("purge of an empty group = %+v, %v", res, err)
	}
	audit := b.audit(t)
	if len(audit) != 2 || audit[0].Action != "failed.retry" || audit[0].Rows != 2 || audit[0].Filter["group"] != g.Fingerprint ||
		audit[0].Filter["ids"] != nil || audit[0].Filter["limit"] != float64(2) || audit[1].Action != "failed.purge" || audit[1].Rows != 2 {
		t.Errorf("audit = %+v", audit)
	}
	if groups, err = adm.FailureGroups(ctx, admin.Filter{}); err != nil || len(groups) != 2 {
		t.Errorf("groups after = %+v, %v", groups, err)
	}
	if _, err := adm.RetryFailed(ctx, admin.Filter{Group: "not-a-group"}, admin.ActionOptions{}); err == nil {
		t.Error("retry of a malformed group: no error")
	}
}
