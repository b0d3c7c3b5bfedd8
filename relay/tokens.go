package relay

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
)

// tokens numbers a replica's claims: each writes "<ID>#<n>" to locked_by.
type tokens struct {
	id  string
	seq atomic.Uint64
}

// newTokens starts the numbers at a random point, so that replicas
// mistakenly given the same ID still write distinct tokens.
func newTokens(id string) *tokens {
	t := &tokens{id: id}
	t.seq.Store(rand.Uint64() >> 24)
	return t
}

// next returns the token of a new claim.
func (t *tokens) next() string {
	return t.id + "#" + strconv.FormatUint(t.seq.Add(1), 10)
}
