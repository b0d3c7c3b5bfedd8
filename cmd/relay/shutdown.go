package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// The process exits within --shutdown-timeout + 2s of SIGTERM, whatever the
// sink or the database does. relay.Run returns within --shutdown-timeout +
// 1s; runGrace gives it a little more before the process stops waiting,
// and closing the sink and the pool gets closeBound each.
const (
	runGrace   = 1500 * time.Millisecond
	closeBound = 200 * time.Millisecond
)

// runBounded calls run(ctx) and returns its error; once ctx has ended it
// waits at most limit more. A run that outlives that is left behind (the
// process is about to exit) and reported as an error.
func runBounded(ctx context.Context, run func(context.Context) error, limit time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("shutdown did not finish within %v; exiting anyway (rows still held return to the other replicas when their lease ends)", limit)
	}
}

// closeWithin calls closeFn and waits for it at most closeBound; a close that
// takes longer (connections to a server that stopped answering) is left
// behind and logged.
func closeWithin(logger *slog.Logger, what string, closeFn func()) {
	done := make(chan struct{})
	go func() {
		closeFn()
		close(done)
	}()
	t := time.NewTimer(closeBound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		logger.Warn("closing did not finish in time; exiting anyway", "what", what, "waited", closeBound)
	}
}
