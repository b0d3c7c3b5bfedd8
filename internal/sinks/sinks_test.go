package sinks

import (
	"slices"
	"strings"
	"testing"
)

// Parse reads a sink's flags as relay run does, and Changed returns those
// not at their default as variables: what a harness hands its relays. A
// webhook reader points --webhook-url at its receiver.
func TestParseAndChanged(t *testing.T) {
	t.Parallel()
	nats, _ := Named("nats")
	_, fs, err := nats.Parse("--nats-url", "nats://127.0.0.1:1", "--nats-max-in-flight", "7")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Changed(fs), []string{"OUTBOX_NATS_MAX_IN_FLIGHT=7", "OUTBOX_NATS_URL=nats://127.0.0.1:1"}; !slices.Equal(got, want) {
		t.Errorf("Changed = %q, want %q", got, want)
	}

	hook, _ := Named("webhook")
	settings, fs, err := hook.Parse()
	if err != nil {
		t.Fatal(err)
	}
	r, err := settings.(Readable).Reader("")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if env := Changed(fs); len(env) != 1 || !strings.HasPrefix(env[0], "OUTBOX_WEBHOOK_URL=http://127.0.0.1:") {
		t.Errorf("Changed after Reader = %q, want the receiver's URL", env)
	}
	if _, err := settings.(Readable).Reader(""); err == nil || !strings.Contains(err.Error(), "leave --webhook-url") {
		t.Errorf("a second Reader with --webhook-url set: %v, want refused", err)
	}
}
