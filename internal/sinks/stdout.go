package sinks

import (
	"io"
	"log/slog"

	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
	stdoutsink "github.com/outboxrelay/outboxrelay/publishers/stdout"
	"github.com/outboxrelay/outboxrelay/relay"
)

// stdoutSink prints JSON lines on standard output; it has no flags.
func init() { register(stdoutSink) }

var stdoutSink = Sink{
	Name:        "stdout",
	CloudEvents: cloudevents.Stdout,
	About:       "JSON lines, for debugging",
	Flags:       func(Flags) Settings { return stdoutSettings{} },
}

type stdoutSettings struct{}

func (stdoutSettings) Check(relay.Config) error { return nil }

func (stdoutSettings) Open(_ relay.Config, _ *slog.Logger, stdout io.Writer) (publishers.Publisher, error) {
	return stdoutsink.New(stdout), nil
}
