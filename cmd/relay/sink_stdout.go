package main

import (
	"io"
	"log/slog"

	"github.com/outboxrelay/outboxrelay/publishers"
	stdoutsink "github.com/outboxrelay/outboxrelay/publishers/stdout"
	"github.com/outboxrelay/outboxrelay/relay"
)

// stdoutSink prints JSON lines on standard output; it has no flags.
func init() { registerSink(stdoutSink) }

var stdoutSink = sink{
	name:  "stdout",
	about: "JSON lines, for debugging",
	flags: func(*flags) sinkSettings { return stdoutSettings{} },
}

type stdoutSettings struct{}

func (stdoutSettings) check(relay.Config) error { return nil }

func (stdoutSettings) open(_ relay.Config, _ *slog.Logger, stdout io.Writer) (publishers.Publisher, error) {
	return stdoutsink.New(stdout), nil
}
