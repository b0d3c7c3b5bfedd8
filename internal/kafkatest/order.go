package kafkatest

import (
	"strconv"
	"strings"
	"testing"
)

// CheckKeyOrder asserts that records whose values are "<key>:<seq>" hold,
// per key, exactly the sequence 0..perKey-1 for keys keys once duplicates
// are collapsed (first copies count): the per-key order checker of the
// ordered-delivery tests. It returns the number of duplicates.
func CheckKeyOrder(t testing.TB, recs []Record, keys, perKey int) (duplicates int) {
	t.Helper()
	seen := map[string]map[int]bool{}
	next := map[string]int{}
	violations := 0
	for _, r := range recs {
		key, seqText, ok := strings.Cut(string(r.Value), ":")
		seq, err := strconv.Atoi(seqText)
		if !ok || err != nil || key != string(r.Key) {
			t.Fatalf("unexpected record key %q value %q", r.Key, r.Value)
		}
		if seen[key] == nil {
			seen[key] = map[int]bool{}
		}
		if seen[key][seq] {
			duplicates++
			continue
		}
		seen[key][seq] = true
		if seq != next[key] {
			violations++
			if violations <= 5 {
				t.Errorf("key %s: got event %d, expected %d next", key, seq, next[key])
			}
		}
		next[key] = seq + 1
	}
	if violations > 0 {
		t.Errorf("%d order violations", violations)
	}
	if len(next) != keys {
		t.Errorf("%d keys delivered, want %d", len(next), keys)
	}
	for key, n := range next {
		if n != perKey {
			t.Errorf("key %s: %d events delivered, want %d", key, n, perKey)
		}
	}
	return duplicates
}
