package relay

import (
	"sync"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// batchSizer is the adaptive size of a loop's claims (Config.BatchMin,
// BatchSize, BatchBytes). Claims start at BatchMin rows; a claim that comes
// back full doubles the next, up to BatchSize, while its rows' bytes leave
// room under BatchBytes; a claim that comes back less than a quarter full
// halves it, down to BatchMin. So a backlog drains in big batches, which
// cost the database and the sink less per event, and a lightly loaded
// relay is back to small ones: the first events of the next burst go out
// in a small, quick batch. A batch whose rows reached BatchBytes shrinks
// the next in proportion. A claim that ran out of time halves the next,
// down to one row and below BatchMin, so that a relay whose statements
// keep timing out does less work per attempt instead of repeating the
// same work for ever; full claims double it back.
//
// The unordered workers share one batchSizer; the ordered loop has its
// own. It is safe for concurrent use.
type batchSizer struct {
	min, max, maxBytes int

	mu  sync.Mutex
	cur int
}

func newBatchSizer(minRows, maxRows, maxBytes int) *batchSizer {
	return &batchSizer{min: minRows, max: maxRows, maxBytes: maxBytes, cur: minRows}
}

// next returns how many rows the next claim asks for.
func (s *batchSizer) next() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// observe adjusts the size after a claim that asked for limit rows took
// claimed rows of bytes bytes (payloads, keys and headers).
func (s *batchSizer) observe(limit, claimed, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = s.resize(limit, claimed, bytes)
}

// timedOut halves the size after a claim of limit rows that ran out of
// time, down to one row.
func (s *batchSizer) timedOut(limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = max(1, limit/2)
}

// resize is the rule of observe.
func (s *batchSizer) resize(limit, claimed, bytes int) int {
	// The most rows whose bytes fit BatchBytes, going by this batch's
	// mean row.
	fit := s.max
	if claimed > 0 && bytes > 0 {
		fit = int(min(int64(s.max), int64(claimed)*int64(s.maxBytes)/int64(bytes)))
	}
	var n int
	switch {
	case bytes >= s.maxBytes:
		n = fit
	case claimed >= limit:
		n = min(2*limit, fit)
	case claimed < limit/4:
		n = limit / 2
	default:
		n = limit
	}
	// Below BatchMin after a timeout, a claim grows back by doubling.
	return max(min(s.min, limit), min(n, s.max))
}

// claimBytesOf returns cfg's bounds.
func claimBytesOf(cfg Config) store.Bounds {
	return store.Bounds{Batch: cfg.BatchBytes, Event: cfg.MaxEventBytes}
}
