package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	server := func(code int, reason string) *amqp.Error {
		return &amqp.Error{Code: code, Reason: reason, Server: true}
	}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, "nil"},
		{"returned", &ReturnedError{Destination{"ex", "k"}, amqp.NoRoute, "NO_ROUTE"}, "permanent"},
		{"wrapped returned", fmt.Errorf("event x: %w", &ReturnedError{Code: amqp.NoRoute}), "permanent"},
		{"exchange not found", server(amqp.NotFound, "NOT_FOUND - no exchange 'x' in vhost '/'"), "permanent"},
		{"too large", fmt.Errorf("%w: 11 bytes", ErrTooLarge), "permanent"},
		{"invalid destination", fmt.Errorf("%w: empty", ErrInvalidDestination), "permanent"},
		{"invalid header", fmt.Errorf("%w: empty name", outbox.ErrInvalidHeader), "permanent"},
		{"nack", ErrNacked, "transient"},
		{"ambiguous return", errAmbiguousReturn, "transient"},
		{"channel closed by another", fmt.Errorf("%w (404)", ErrChannelClosed), "transient"},
		{"access refused", server(amqp.AccessRefused, "ACCESS_REFUSED - access to exchange 'x' refused"), "transient"},
		{"precondition failed", server(amqp.PreconditionFailed, "PRECONDITION_FAILED - invalid expiration"), "transient"},
		{"connection lost", fmt.Errorf("%w: %w", ErrConnectionLost, server(amqp.NotFound, "x")), "unavailable"},
		{"connection forced", server(amqp.ConnectionForced, "CONNECTION_FORCED - broker forced connection closure"), "unavailable"},
		{"frame error", &amqp.Error{Code: amqp.FrameError, Reason: "EOF"}, "unavailable"},
		{"closed channel", amqp.ErrClosed, "unavailable"},
		{"closed publisher", ErrClosed, "unavailable"},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, "unavailable"},
		{"reset", fmt.Errorf("write: %w", syscall.ECONNRESET), "unavailable"},
		{"deadline", context.DeadlineExceeded, "unavailable"},
		{"canceled", context.Canceled, "transient"},
		{"marked", publishers.Unavailable(errors.New("x")), "unavailable"},
		{"other", errors.New("something"), "transient"},
	} {
		got := classify(c.err)
		class := "transient"
		switch {
		case got == nil:
			class = "nil"
		case publishers.IsPermanent(got):
			class = "permanent"
		case errors.Is(got, publishers.ErrUnavailable):
			class = "unavailable"
		}
		if class != c.want {
			t.Errorf("%s: classify(%v) = %s (%v), want %s", c.name, c.err, class, got, c.want)
		}
		if c.err != nil && !errors.Is(got, c.err) {
			t.Errorf("%s: classify lost the cause", c.name)
		}
	}
}

func TestBrokerReplies(t *testing.T) {
	t.Parallel()
	ex, ok := missingExchange(&amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no exchange 'orders.v2' in vhost 'prod'"})
	if !ok || ex != "orders.v2" {
		t.Errorf("missingExchange = %q, %t; want orders.v2", ex, ok)
	}
	if _, ok := missingExchange(&amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no queue 'q' in vhost '/'"}); ok {
		t.Error("missingExchange took a missing queue for an exchange")
	}
	for _, reason := range []string{
		"PRECONDITION_FAILED - message size 2000 is larger than configured max size 1000",
		"PRECONDITION_FAILED - message size 2000 is larger than max size 1000",
	} {
		if limit, ok := brokerMaxSize(&amqp.Error{Code: amqp.PreconditionFailed, Reason: reason}); !ok || limit != 1000 {
			t.Errorf("brokerMaxSize(%q) = %d, %t; want 1000", reason, limit, ok)
		}
	}
	if _, ok := brokerMaxSize(&amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - invalid expiration"}); ok {
		t.Error("brokerMaxSize read a limit from another 406")
	}
}

func TestMatchReturns(t *testing.T) {
	t.Parallel()
	out := []outgoing{{pub: amqp.Publishing{MessageId: "a"}}, {pub: amqp.Publishing{MessageId: "b"}}, {pub: amqp.Publishing{MessageId: "a"}},
		{pub: amqp.Publishing{MessageId: "c"}}, {pub: amqp.Publishing{MessageId: "c"}}}
	ra, rc1, rc2 := &ReturnedError{Text: "a"}, &ReturnedError{Text: "c1"}, &ReturnedError{Text: "c2"}
	got := matchReturns(out, map[string][]*ReturnedError{"a": {ra}, "c": {rc1, rc2}})
	want := []error{errAmbiguousReturn, nil, errAmbiguousReturn, rc1, rc2}
	for j := range want {
		if got[j] != want[j] {
			t.Errorf("message %d: %v, want %v", j, got[j], want[j])
		}
	}
}
