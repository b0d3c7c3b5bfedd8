package relay

import (
	"slices"
	"sync"
	"testing"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// The adaptive batch size grows while claims come back full, shrinks when
// they come back mostly empty, stays within its bounds, and follows the
// rows' bytes.
func TestBatchSizer(t *testing.T) {
	t.Parallel()
	const minRows, maxRows, maxBytes = 100, 1000, 1 << 20
	type claim struct{ claimed, bytes int }
	for _, tc := range []struct {
		name   string
		claims []claim // each asks for what the sizer says
		want   []int   // the size after each
	}{
		{"grows while full, up to the max",
			[]claim{{100, 20_000}, {200, 40_000}, {400, 80_000}, {800, 160_000}, {1000, 200_000}},
			[]int{200, 400, 800, 1000, 1000}},
		{"a claim more than a quarter full keeps the size",
			[]claim{{100, 20_000}, {200, 40_000}, {150, 30_000}, {100, 20_000}},
			[]int{200, 400, 400, 400}},
		{"shrinks by half when under a quarter full, down to the min",
			[]claim{{100, 0}, {200, 0}, {400, 0}, {10, 100}, {3, 30}, {0, 0}, {0, 0}, {0, 0}},
			[]int{200, 400, 800, 400, 200, 100, 100, 100}},
		{"an idle relay stays at the min", []claim{{0, 0}, {1, 200}, {99, 19_800}}, []int{100, 100, 100}},
		{"growth stops where the rows' bytes would pass the bound",
			// 100 rows of 4 KiB: 256 fit in 1 MiB.
			[]claim{{100, 100 << 12}, {200, 200 << 12}, {256, 256 << 12}},
			[]int{200, 256, 256}},
		{"a batch past the bound shrinks the next in proportion, not below the min",
			// 200 rows of 8 KiB = 1.6 MiB: 128 fit; then 100 rows of 64 KiB: 16 fit, the min is 100.
			[]claim{{100, 20_000}, {200, 200 << 13}, {100, 100 << 16}},
			[]int{200, 128, 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newBatchSizer(minRows, maxRows, maxBytes)
			if got := s.next(); got != minRows {
				t.Fatalf("first size %d, want the min %d", got, minRows)
			}
			for i, c := range tc.claims {
				limit := s.next()
				if c.claimed > limit {
					t.Fatalf("claim %d: %d rows claimed of a limit of %d: bad case", i, c.claimed, limit)
				}
				s.observe(limit, c.claimed, c.bytes)
				if got := s.next(); got != tc.want[i] {
					t.Fatalf("after claim %d (%d of %d rows, %d bytes): size %d, want %d", i, c.claimed, limit, c.bytes, got, tc.want[i])
				}
			}
		})
	}
}

// A fixed size (min = max) never moves, and concurrent workers keep the
// size within its bounds.
func TestBatchSizerBounds(t *testing.T) {
	t.Parallel()
	fixed := newBatchSizer(50, 50, 1<<20)
	for _, c := range [][2]int{{50, 1000}, {0, 0}, {50, 2 << 20}} {
		fixed.observe(fixed.next(), c[0], c[1])
		if got := fixed.next(); got != 50 {
			t.Fatalf("fixed size moved to %d", got)
		}
	}
	s := newBatchSizer(10, 640, 1<<20)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				limit := s.next()
				claimed := limit
				if (i+w)%3 == 0 {
					claimed = 0
				}
				s.observe(limit, claimed, claimed*100)
				if n := s.next(); n < 10 || n > 640 {
					t.Errorf("size %d outside [10, 640]", n)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A claim's bytes are the sizes the database measured, a row above the
// event bound counting for nothing; a claim is full with limit rows or
// with rows that reached the batch bound.
func TestClaimBytes(t *testing.T) {
	t.Parallel()
	b := store.Bounds{Batch: 1000, Event: 500}
	rows := []store.Row{{Size: 200}, {Size: 501}, {Size: 300}}
	if got := b.RowBytes(rows); got != 500 {
		t.Errorf("rowBytes = %d, want 500 (the row of 501 bytes counts for nothing)", got)
	}
	if b.Full(10, rows) {
		t.Error("3 rows of 500 counted bytes, limit 10: full")
	}
	if !b.Full(3, rows) {
		t.Error("3 rows, limit 3: not full")
	}
	if !b.Full(10, append(rows, store.Row{Size: 500})) {
		t.Error("rows of 1000 counted bytes, batch bound 1000: not full")
	}
}

// A claim that ran out of time halves the next, down to one row and below
// the min; full claims then double it back, and a partial one keeps it.
func TestBatchSizerHalvesAfterATimeout(t *testing.T) {
	t.Parallel()
	s := newBatchSizer(100, 1000, 1<<20)
	s.observe(100, 100, 100)
	s.observe(200, 200, 200)
	var sizes []int
	for range 10 {
		s.timedOut(s.next())
		sizes = append(sizes, s.next())
	}
	want := []int{200, 100, 50, 25, 12, 6, 3, 1, 1, 1}
	if !slices.Equal(sizes, want) {
		t.Fatalf("sizes after timeouts %v, want %v", sizes, want)
	}
	s.observe(1, 1, 1)
	s.observe(2, 2, 2)
	s.observe(4, 1, 1)
	if got := s.next(); got != 4 {
		t.Fatalf("after full claims of 1 and 2 rows and a partial one of 4: size %d, want 4", got)
	}
	for range 5 {
		s.observe(s.next(), s.next(), s.next())
	}
	if got := s.next(); got != 128 {
		t.Fatalf("after five more full claims: size %d, want 128", got)
	}
}
