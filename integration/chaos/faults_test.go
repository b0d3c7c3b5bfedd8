package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"

	"github.com/outboxrelay/outboxrelay/internal/history"
)

// inject runs one fault and returns its window. Relay faults wait (briefly)
// for the victim to hold claimed rows, so that the fault lands mid-batch.
func (c *cluster) inject(ctx context.Context, s step, rng *rand.Rand) history.Window {
	sl := c.slots[s.slot]
	w := history.Window{Kind: s.kind, Target: sl.proc.name}
	var stopped time.Time // when the relay was caught, if it was
	switch s.kind {
	case kill9, sigterm, freeze:
		// The relay is stopped (SIGSTOP) holding claimed rows, if it could
		// be caught with some within a few seconds.
		var held int
		if held, stopped = c.catchHolding(ctx, sl.proc, rng); held > 0 {
			w.Target += fmt.Sprintf(" holding %d rows", held)
		} else {
			w.Target += " holding no rows"
		}
	case pgRestart, mariadbRestart, brokerDown, brokerStall, brokerSlow, brokerErrors:
		w.Target = "all"
	}
	// Outages cut every relay off from the broker: the checker reports
	// how delivery recovered after each.
	w.Outage = s.kind == brokerDown || s.kind == brokerStall || s.kind == sigtermBrokerStall
	// A caught relay's fault starts when it was stopped: checking what it
	// holds may take a busy machine a second or more.
	w.Start = time.Now()
	if !stopped.IsZero() {
		w.Start = stopped
	}
	switch s.kind {
	case kill9:
		_ = sl.proc.cmd.Process.Kill()
		<-sl.proc.done
		w.End = time.Now()
		sleep(ctx, s.length)
		c.startRelay(ctx, sl)
	case sigterm:
		took := c.terminate(ctx, s.kind, sl.proc)
		w.Target += fmt.Sprintf(", exited %s after SIGTERM", took.Round(time.Millisecond))
		w.End = time.Now()
		sleep(ctx, s.length)
		c.startRelay(ctx, sl)
	case sigtermBrokerStall:
		// Every broker connection stalls; once the relay holds rows it is
		// publishing into the stall, it gets SIGTERM. The broker heals when
		// the fault's length is over, and not before the relay has exited:
		// its exit must not wait for the broker. A request it had written
		// before giving its rows back may be appended at the heal, so the
		// window runs from the stall to the heal.
		c.brokerProxy.Stall()
		if held := c.awaitPublishing(ctx, sl.proc); held > 0 {
			w.Target += fmt.Sprintf(" holding %d rows", held)
		} else {
			w.Target += " holding no rows"
		}
		took := c.terminate(ctx, s.kind, sl.proc)
		w.Target += fmt.Sprintf(", exited %s after SIGTERM", took.Round(time.Millisecond))
		sleep(ctx, time.Until(w.Start.Add(s.length)))
		c.brokerProxy.Heal()
		w.End = time.Now()
		c.startRelay(ctx, sl)
	case freeze:
		_ = sl.proc.cmd.Process.Signal(syscall.SIGSTOP) // if not caught already
		sleep(ctx, s.length)
		_ = sl.proc.cmd.Process.Signal(syscall.SIGCONT)
		w.End = time.Now()
	case pgRestart, mariadbRestart:
		if err := c.db.restart(ctx); err != nil {
			c.t.Errorf("%s: %v", s.kind, err)
		}
		w.End = time.Now()
	case pgCut, pgStall, pgSlow, mariadbCut, mariadbStall, mariadbSlow:
		switch s.kind {
		case pgCut, mariadbCut:
			sl.pgProxy.Cut()
		case pgStall, mariadbStall:
			sl.pgProxy.Stall()
		case pgSlow, mariadbSlow:
			sl.pgProxy.Slow(time.Duration(5+rng.IntN(46)) * time.Millisecond)
		}
		sleep(ctx, s.length)
		sl.pgProxy.Heal()
		w.End = time.Now()
	case brokerDown, brokerStall, brokerSlow:
		switch s.kind {
		case brokerDown:
			c.brokerProxy.Cut()
		case brokerStall:
			c.brokerProxy.Stall()
		case brokerSlow:
			c.brokerProxy.Slow(time.Duration(20+rng.IntN(181)) * time.Millisecond)
		}
		sleep(ctx, s.length)
		c.brokerProxy.Heal()
		w.End = time.Now()
	case brokerErrors:
		share := 0.2 + 0.5*rng.Float64()
		c.sink.refuse(&share)
		sleep(ctx, s.length)
		c.sink.refuse(nil)
		w.End = time.Now()
	}
	return w
}

// catchHolding tries for a few seconds to stop the relay (SIGSTOP) while
// it holds claimed rows: it stops the process, lets the statements it had
// sent finish, and counts its rows; with none, it resumes the process and
// tries again a moment later. It returns the rows held and when the
// process was stopped, the process left stopped, or 0 with the process
// running.
func (c *cluster) catchHolding(ctx context.Context, p *relayProc, rng *rand.Rand) (int, time.Time) {
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		stopped := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return 0, time.Time{}
		}
		if await(ctx, time.Second, func() bool { return c.activeStatements(ctx, p.name) == 0 }) {
			if n := c.holding(ctx, p.name); n > 0 {
				return n, stopped
			}
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		sleep(ctx, time.Duration(1+rng.IntN(20))*time.Millisecond)
	}
	return 0, time.Time{}
}

// awaitPublishing waits, for at most the publish timeout (after which a
// relay whose publish hangs takes the sink for down and claims no more),
// until p holds claimed rows while none of its statements runs: it is
// publishing them. It returns the rows held, or 0 if that moment did not
// come.
func (c *cluster) awaitPublishing(ctx context.Context, p *relayProc) int {
	var n int
	await(ctx, publishTimeout, func() bool {
		if c.activeStatements(ctx, p.name) != 0 {
			return false
		}
		n = c.holding(ctx, p.name)
		return n > 0
	})
	return n
}

// terminate sends p SIGTERM (and SIGCONT, should it be stopped) and waits
// for it to exit. The test fails when the exit takes longer than exitBound
// plus exitSlack or its status is not 0, or when p still holds claimed
// rows after a clean exit (the database answers during every fault that sends SIGTERM, so it
// must have recorded or given them back). A process still running a minute
// after SIGTERM is killed. terminate returns how long the exit took and
// records it in c.exits.
func (c *cluster) terminate(ctx context.Context, kind string, p *relayProc) time.Duration {
	sent := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		c.t.Errorf("%s (%s) did not exit within a minute of SIGTERM; killed", p.name, kind)
	}
	took := time.Since(sent)
	c.exits = append(c.exits, exit{kind: kind, name: p.name, took: took})
	if took > exitBound+exitSlack {
		c.t.Errorf("%s (%s) took %s to exit after SIGTERM, want --shutdown-timeout + 2s = %s (and at most %s more on a busy machine); stderr:\n%s",
			p.name, kind, took.Round(time.Millisecond), exitBound, exitSlack, syncbuf.Tail(p.stderr.String(), 3000))
	}
	if p.err != nil {
		c.t.Errorf("%s (%s) exited with %v after SIGTERM, want 0; stderr:\n%s", p.name, kind, p.err, syncbuf.Tail(p.stderr.String(), 3000))
	} else if n := c.holding(ctx, p.name); n > 0 {
		c.t.Errorf("%s (%s) exited 0 still holding %d claimed rows, want them recorded or given back; stderr:\n%s",
			p.name, kind, n, syncbuf.Tail(p.stderr.String(), 3000))
	}
	return took
}

// fencedWrites counts the write-backs a relay process reported fenced: the
// outcomes it did not record because another replica held the rows by then.
func fencedWrites(stderr string) int {
	return strings.Count(stderr, "another claim holds now")
}

// sleep waits d or until ctx ends. The schedule's pauses are durations of
// faults, not waits for a condition.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
