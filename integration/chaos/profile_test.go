package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"
)

// Fault kinds; see the package comment.
const (
	kill9              = "kill9"
	sigterm            = "sigterm"
	sigtermBrokerStall = "sigterm-broker-stall"
	freeze             = "freeze"
	pgRestart          = "pg-restart"
	pgCut              = "pg-cut"
	pgStall            = "pg-stall"
	pgSlow             = "pg-slow"
	brokerDown         = "broker-down"
	brokerStall        = "broker-stall"
	brokerSlow         = "broker-slow"
	brokerErrors       = "broker-errors"
)

var allKinds = []string{kill9, sigterm, sigtermBrokerStall, freeze, pgRestart, pgCut, pgStall, pgSlow,
	brokerDown, brokerStall, brokerSlow, brokerErrors}

// profile sizes a run.
type profile struct {
	name string
	// relays is the number of `relay run` processes; writers the
	// producer's concurrent writers and txPerSecond their combined rate.
	relays, writers, txPerSecond int
	// duration bounds the fault schedule; 0 means every kind once.
	duration time.Duration
	// faultMin..faultMax is how long a fault lasts; gap the quiet time
	// after each.
	faultMin, faultMax, gap time.Duration
	// drainTimeout bounds the wait for an empty backlog after the last
	// fault.
	drainTimeout time.Duration
}

var profiles = map[string]profile{
	"short": {name: "short", relays: 3, writers: 4, txPerSecond: 200,
		faultMin: 2 * time.Second, faultMax: 4 * time.Second, gap: 1500 * time.Millisecond, drainTimeout: 90 * time.Second},
	"long": {name: "long", relays: 3, writers: 6, txPerSecond: 300, duration: 10 * time.Minute,
		faultMin: 2 * time.Second, faultMax: 8 * time.Second, gap: 2 * time.Second, drainTimeout: 3 * time.Minute},
}

// Relay settings of the run: short leases and backoffs so that faults
// resolve within seconds.
const (
	lease          = 2 * time.Second
	publishTimeout = 3 * time.Second
	// shutdownTimeout is shorter than publishTimeout, as the defaults are
	// (10s and 1m): a SIGTERM during a stalled publish is then ended by the
	// shutdown timeout, which gives the rows back, and not by the publish
	// timeout first, which would take the broker for down as a broker-stall
	// does.
	shutdownTimeout = 2 * time.Second
	// exitBound is how long a relay may take to exit after SIGTERM,
	// whatever the sink or the database does: --shutdown-timeout + 2s.
	exitBound = shutdownTimeout + 2*time.Second
	// explainAfter is how long after a fault a duplicate's first copy
	// is still put down to it: a relay cut off by the fault may finish a
	// publish begun before the heal (up to publishTimeout), and rows it
	// held come back to another relay when their lease lapses. Twice
	// lease + publishTimeout, since a host busy with other work stretches
	// each step: with publishTimeout + 1s, first copies 0.2 s past the
	// window failed two runs of the long profile on a host at load 35.
	explainAfter = 2 * (lease + publishTimeout)
	// exitSlack is what the run allows beyond exitBound: a busy machine
	// fires the relay's timers late. A relay that missed a bound would
	// wait for publishTimeout and its lease, or for ever.
	exitSlack = 10 * time.Second
	// orderedTopic and plainTopic name the run's topics, with a suffix
	// unique to the run (runTopics).
	orderedTopic = "chaos.ordered"
	plainTopic   = "chaos.plain"
)

// step is one scheduled fault.
type step struct {
	kind string
	// slot is the relay the fault targets (relay and pg-* kinds).
	slot int
	// length is how long the fault lasts (for kill9 and sigterm: how long
	// the slot stays empty; for sigterm-broker-stall: how long the broker
	// stays stalled, at least until the relay has exited).
	length time.Duration
}

func (s step) String() string {
	return fmt.Sprintf("%s(slot %d, %s)", s.kind, s.slot, s.length.Round(time.Millisecond))
}

// schedule draws the run's faults of the given kinds from rng: every kind
// once in random order for a profile without a duration, random kinds until
// the duration is spent otherwise.
func schedule(p profile, kinds []string, rng *rand.Rand) []step {
	draw := func(kind string) step {
		s := step{kind: kind, slot: rng.IntN(p.relays), length: p.faultMin + time.Duration(rng.Int64N(int64(p.faultMax-p.faultMin)+1))}
		if kind == freeze || kind == pgStall || kind == mariadbStall {
			s.length = max(s.length, lease+time.Second) // past the lease, so others take over
		}
		return s
	}
	var steps []step
	if p.duration == 0 {
		for _, i := range rng.Perm(len(kinds)) {
			steps = append(steps, draw(kinds[i]))
		}
		return steps
	}
	var total time.Duration
	for total < p.duration {
		s := draw(kinds[rng.IntN(len(kinds))])
		steps = append(steps, s)
		total += s.length + p.gap
	}
	return steps
}

// settings reads the profile, seed and duration from the environment.
func settings() (profile, uint64, error) {
	name := os.Getenv("OUTBOX_CHAOS_PROFILE")
	if name == "" {
		name = "short"
	}
	p, ok := profiles[name]
	if !ok {
		return p, 0, fmt.Errorf("OUTBOX_CHAOS_PROFILE=%q: want short or long", name)
	}
	if s := os.Getenv("OUTBOX_CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return p, 0, fmt.Errorf("OUTBOX_CHAOS_DURATION=%q: want a positive duration such as 10m", s)
		}
		p.duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OUTBOX_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			return p, 0, fmt.Errorf("OUTBOX_CHAOS_SEED=%q: %w", s, err)
		}
	}
	return p, seed, nil
}
