package relay

import (
	"fmt"
	"strings"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/pgstore"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// HeadOfLine says what happens to the later events of a key while its
// earliest event keeps failing.
type HeadOfLine string

// Head-of-line policies.
const (
	// HeadOfLineWait holds a key's later events until its earliest one is
	// sent or has failed for good (MaxAttempts, or a permanent error).
	HeadOfLineWait HeadOfLine = "wait"
	// HeadOfLinePark marks an event failed ("parked") at its first
	// transient failure, so the key's later events go on at once. An
	// operator re-drives parked events by hand.
	HeadOfLinePark HeadOfLine = "park"
)

// Buckets is the number of hash buckets keys fall into; shards group them.
const Buckets = pgstore.Buckets

// Ordering configures per-key ordered delivery. Every replica serving a
// table must use the same Topics and Shards.
type Ordering struct {
	// Topics whose keyed events are delivered in per-key order: topics,
	// or patterns in which each * stands for any run of characters, dots
	// included, as in a route (publishers/route): "orders.*" matches
	// "orders.created"; "*" means every topic. Events without a key are
	// never ordered. Defaults to none: ordering off.
	Topics []string
	// Shards is the number of shards keys are spread over: an ordered loop
	// leases one shard at a time and publishes its rows in order. Between
	// 1 and 1024. Defaults to 16.
	Shards int
	// Loops is how many shards a replica serves at once: its ordered
	// loops, each of which leases a shard of its own and claims,
	// publishes and records one batch of it at a time. Between 1 and 64.
	// Defaults to 2 (DefaultOrderedLoops).
	Loops int
	// ShardBudget is how many rows a replica claims from a shard before it
	// hands the shard back, so that no shard starves. Defaults to 10 times
	// BatchMin.
	ShardBudget int
	// HeadOfLine is the policy for a key whose earliest event keeps
	// failing. Defaults to HeadOfLineWait.
	HeadOfLine HeadOfLine
}

// enabled reports whether any topic is ordered.
func (o Ordering) enabled() bool { return len(o.Topics) > 0 }

// allTopics reports whether every topic is ordered.
func (o Ordering) allTopics() bool {
	all, _ := store.OrderedTopics(o.Topics)
	return all
}

func (o Ordering) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: "Ordering." + field, Reason: fmt.Sprintf(format, args...)}
	}
	for _, t := range o.Topics {
		// A pattern is valid when its *s, each taken for one character,
		// leave a valid topic: route patterns follow the same rule.
		if err := outbox.ValidateTopic(strings.ReplaceAll(t, "*", "x")); err != nil {
			return bad("Topics", "%q matches no valid topic: %v", t, err)
		}
	}
	switch {
	case o.Shards < 0 || o.Shards > Buckets || o.enabled() && o.Shards == 0:
		return bad("Shards", "%d is not between 1 and %d", o.Shards, Buckets)
	case o.Loops < 0 || o.Loops > 64 || o.enabled() && o.Loops == 0:
		return bad("Loops", "%d is not between 1 and 64", o.Loops)
	case o.ShardBudget < 0 || o.enabled() && o.ShardBudget == 0:
		return bad("ShardBudget", "%d is less than 1", o.ShardBudget)
	case o.HeadOfLine != "" && o.HeadOfLine != HeadOfLineWait && o.HeadOfLine != HeadOfLinePark:
		return bad("HeadOfLine", "%q is neither %q nor %q", o.HeadOfLine, HeadOfLineWait, HeadOfLinePark)
	}
	return nil
}
