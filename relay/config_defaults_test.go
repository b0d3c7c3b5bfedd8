package relay

import (
	"reflect"
	"testing"
)

// New fills every zero field with what DefaultConfig says, apart from the
// ones DefaultConfig leaves zero because they are derived.
func TestWithDefaultsAppliesDefaultConfig(t *testing.T) {
	t.Parallel()
	got := Config{Ordering: Ordering{Topics: []string{"*"}}}.withDefaults()
	want := DefaultConfig()
	want.Ordering.Topics = []string{"*"}
	// Derived: compare them apart and then take them over.
	if got.ID == "" || got.Logger == nil {
		t.Errorf("ID %q, Logger %v: not filled", got.ID, got.Logger)
	}
	if got.PollMin != DefaultPollMin {
		t.Errorf("PollMin = %v, want DefaultPollMin %v", got.PollMin, DefaultPollMin)
	}
	if got.BatchMin != DefaultBatchMin {
		t.Errorf("BatchMin = %d, want DefaultBatchMin %d", got.BatchMin, DefaultBatchMin)
	}
	if got.Ordering.ShardBudget != DefaultShardBudgetBatches*DefaultBatchMin {
		t.Errorf("Ordering.ShardBudget = %d, want %d × BatchMin", got.Ordering.ShardBudget, DefaultShardBudgetBatches)
	}
	want.ID, want.Logger, want.PollMin, want.BatchMin, want.Ordering.ShardBudget = got.ID, got.Logger, got.PollMin, got.BatchMin, got.Ordering.ShardBudget
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Config{}.withDefaults() =\n%+v\nDefaultConfig() =\n%+v", got, want)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
}
