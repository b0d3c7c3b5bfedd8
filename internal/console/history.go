package console

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/admin"
)

// historySpan is how far back the overview's chart reaches.
const historySpan = time.Hour

// Sample is the backlog at one moment, for the overview's chart.
type Sample struct {
	At               time.Time `json:"at"`
	OldestDueSeconds *float64  `json:"oldest_due_seconds"`
	PendingDue       int64     `json:"pending_due"`
	Failed           int64     `json:"failed"`
}

// history is the last hour of samples, oldest first: taken by Sample and
// by every GET /api/status. It lives in the console's memory, so it
// starts empty when the console starts.
type history struct {
	mu      sync.Mutex
	samples []Sample
}

func (h *history) add(st *admin.Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := Sample{At: st.At, OldestDueSeconds: st.OldestDueSeconds, PendingDue: st.Totals.PendingDue, Failed: st.Totals.Failed}
	h.samples = append(h.samples, s)
	drop := 0
	for drop < len(h.samples) && s.At.Sub(h.samples[drop].At) > historySpan {
		drop++
	}
	h.samples = append(h.samples[:0:0], h.samples[drop:]...)
}

func (h *history) get() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sample{}, h.samples...)
}

// Sample reads the table's status every interval until ctx ends, so that
// the overview's chart covers the time before anyone opened it. A failed
// read leaves a gap; the next one tries again.
func (s *Server) Sample(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if st, err := s.adm.Status(ctx, admin.StatusOptions{}); err == nil {
			s.history.add(st)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) serveHistory(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Samples []Sample `json:"samples"`
	}{s.history.get()})
}
