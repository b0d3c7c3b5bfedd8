package relay

import (
	"testing"

	"github.com/google/uuid"
)

// The rows an ordered write-back keeps noted as claimed are those the
// outcome names in none of its lists: sent, released, retried, failed.
func TestWithoutOutcomeListsTheRowsNoOutcomeNames(t *testing.T) {
	ids := make([]uuid.UUID, 6)
	rows := make([]row, len(ids))
	for i := range ids {
		ids[i] = uuid.New()
		rows[i] = row{id: ids[i]}
	}
	out := &outcome{
		sent:     ids[:1],
		released: ids[1:2],
		retries:  []retry{{id: ids[2]}},
		failures: []failure{{id: ids[3]}},
	}
	got := withoutOutcome(rows, out)
	if len(got) != 2 || got[0] != ids[4] || got[1] != ids[5] {
		t.Errorf("withoutOutcome = %v, want %v", got, ids[4:])
	}
	out.sent = append([]uuid.UUID{ids[0]}, ids[4:]...)
	if got := withoutOutcome(rows, out); len(got) != 0 {
		t.Errorf("withoutOutcome of a batch with every outcome = %v, want none", got)
	}
}
