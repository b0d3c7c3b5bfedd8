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
	switch s.kind {
	case kill9, sigterm, freeze:
		// The relay is stopped (SIGSTOP) holding claimed rows, if it could
		// be caught with some within a few seconds.
		if held := c.catchHolding(ctx, sl.proc, rng); held > 0 {
			w.Target += fmt.Sprintf(" holding %d rows", held)
		} else {
			w.Target += " holding no rows"
		}
	case pgRestart, brokerDown, brokerStall, brokerSlow, brokerErrors:
		w.Target = "all"
	}
	w.Start = time.Now()
	switch s.kind {
	case kill9:
		_ = sl.proc.cmd.Process.Kill()
		<-sl.proc.done
		w.End = time.Now()
		sleep(ctx, s.length)
		c.startRelay(sl)
	case sigterm:
		_ = sl.proc.cmd.Process.Signal(syscall.SIGTERM)
		_ = sl.proc.cmd.Process.Signal(syscall.SIGCONT)
		select {
		case <-sl.proc.done:
			if sl.proc.err != nil {
				c.t.Errorf("%s exited with %v after SIGTERM, want 0; stderr:\n%s", sl.proc.name, sl.proc.err, syncbuf.Tail(sl.proc.stderr.String(), 3000))
			}
		case <-time.After(20 * time.Second):
			c.t.Errorf("%s did not exit within 20s of SIGTERM", sl.proc.name)
			_ = sl.proc.cmd.Process.Kill()
			<-sl.proc.done
		}
		w.End = time.Now()
		sleep(ctx, s.length)
		c.startRelay(sl)
	case freeze:
		_ = sl.proc.cmd.Process.Signal(syscall.SIGSTOP) // if not caught already
		sleep(ctx, s.length)
		_ = sl.proc.cmd.Process.Signal(syscall.SIGCONT)
		w.End = time.Now()
	case pgRestart:
		if err := c.pg.Restart(ctx, "immediate"); err != nil {
			c.t.Errorf("restart PostgreSQL: %v", err)
		}
		w.End = time.Now()
	case pgCut, pgStall, pgSlow:
		switch s.kind {
		case pgCut:
			sl.pgProxy.Cut()
		case pgStall:
			sl.pgProxy.Stall()
		case pgSlow:
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
		c.refuseProduce.Store(&share)
		sleep(ctx, s.length)
		c.refuseProduce.Store(nil)
		w.End = time.Now()
	}
	return w
}

// catchHolding tries for a few seconds to stop the relay (SIGSTOP) while
// it holds claimed rows: it stops the process, lets the statements it had
// sent finish, and counts its rows; with none, it resumes the process and
// tries again a moment later. It returns the rows held, the process left
// stopped, or 0 with the process running.
func (c *cluster) catchHolding(ctx context.Context, p *relayProc, rng *rand.Rand) int {
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return 0
		}
		if await(ctx, time.Second, func() bool { return c.activeStatements(ctx, p.name) == 0 }) {
			if n := c.holding(ctx, p.name); n > 0 {
				return n
			}
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		sleep(ctx, time.Duration(1+rng.IntN(20))*time.Millisecond)
	}
	return 0
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
