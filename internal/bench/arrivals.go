package bench

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// arrivals indexes the records read from a sink's destination by their
// event id (the outbox-event-id header, or the field the sink puts it
// in): when each event first arrived, and how many records there were.
type arrivals struct {
	mu      sync.Mutex
	first   map[uuid.UUID]time.Time
	records int
	notify  chan struct{} // signalled when a new event arrived
}

func newArrivals(capacity int) *arrivals {
	return &arrivals{first: make(map[uuid.UUID]time.Time, capacity), notify: make(chan struct{}, 1)}
}

// add records the records of one fetch response, received at at.
func (a *arrivals) add(ids []uuid.UUID, at time.Time) {
	a.mu.Lock()
	fresh := false
	for _, id := range ids {
		if id == uuid.Nil {
			continue // not an outbox record; the sink always sets the header
		}
		a.records++
		if _, seen := a.first[id]; !seen {
			a.first[id] = at
			fresh = true
		}
	}
	a.mu.Unlock()
	if fresh {
		select {
		case a.notify <- struct{}{}:
		default:
		}
	}
}

// counts returns the distinct events and the duplicate records so far.
// Records without a valid event id are not counted.
func (a *arrivals) counts() (distinct, duplicates int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.first), a.records - len(a.first)
}

// missing counts the ids that have not arrived.
func (a *arrivals) missing(ids []uuid.UUID) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, id := range ids {
		if _, ok := a.first[id]; !ok {
			n++
		}
	}
	return n
}

// at returns when id first arrived.
func (a *arrivals) at(id uuid.UUID) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.first[id]
	return t, ok
}

// merge adds b's records to a's: an event keeps its first arrival.
func (a *arrivals) merge(b *arrivals) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a.mu.Lock()
	for id, at := range b.first {
		if first, seen := a.first[id]; !seen || at.Before(first) {
			a.first[id] = at
		}
	}
	a.records += b.records
	a.mu.Unlock()
	if len(b.first) > 0 {
		select {
		case a.notify <- struct{}{}:
		default:
		}
	}
}
