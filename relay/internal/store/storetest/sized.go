// Package storetest holds what the stores' tests and the relay's share:
// rows of known sizes for the claims' byte bounds.
package storetest

import (
	"bytes"
	"testing"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// SizedPayloads are the payloads the claim bound tests write, in order:
// five of 100 bytes and, third, one of 5,000. With key "k", the bounds
// SizedBounds take the first five: the big row counts for nothing, and the
// bytes before the last one are about 420.
var SizedPayloads = []int{100, 100, 5000, 100, 100, 100}

// SizedBounds are the bounds of the claim bound tests.
var SizedBounds = store.Bounds{Batch: 350, Event: 1000}

const sizedBig = 2 // the index of the big row in SizedPayloads

// CheckSizedClaim checks a claim of the rows written from SizedPayloads
// (ids): the first five, the big one with its size but without its key,
// payload and headers, the others whole.
func CheckSizedClaim(t *testing.T, what string, ids []uuid.UUID, rows []store.Row) {
	t.Helper()
	got := map[uuid.UUID]store.Row{}
	for _, x := range rows {
		got[x.ID] = x
	}
	if len(rows) != 5 {
		t.Errorf("%s took %d rows, want 5: the rows up to the one at which their bytes reach 350", what, len(rows))
	}
	for i, id := range ids {
		x, ok := got[id]
		switch {
		case i == len(ids)-1:
			if ok {
				t.Errorf("%s took the last row, past the batch bound", what)
			}
			continue
		case !ok:
			t.Errorf("%s left row %d behind", what, i)
			continue
		}
		if lo := int64(SizedPayloads[i] + 1); x.Size < lo || x.Size > lo+16 {
			t.Errorf("%s: row %d has size %d, want its payload, key and headers, %d and a few bytes", what, i, x.Size, lo)
		}
		if i == sizedBig {
			if x.Payload != nil || x.Key != nil || x.Headers != nil {
				t.Errorf("%s returned the big row's payload (%d bytes), key %q or headers %q", what, len(x.Payload), x.Key, x.Headers)
			}
			continue
		}
		if !bytes.Equal(x.Payload, bytes.Repeat([]byte("p"), SizedPayloads[i])) || string(x.Key) != "k" || len(x.Headers) == 0 {
			t.Errorf("%s: row %d came back as payload of %d bytes, key %q, headers %q; want it whole", what, i, len(x.Payload), x.Key, x.Headers)
		}
	}
}
