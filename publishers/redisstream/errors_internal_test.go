package redisstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/publishers"
)

// replyError is a Redis error reply, as go-redis returns one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

func TestClassify(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	cases := []struct {
		err  error
		want string
	}{
		{nil, "acknowledged"},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), "permanent"},
		{fmt.Errorf("%w: stream %q", ErrInvalidStream, "a b"), "permanent"},
		{fmt.Errorf("entry of 9 bytes: %w", ErrTooLarge), "permanent"},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), "unavailable"},
		{replyError("LOADING Redis is loading the dataset in memory"), "unavailable"},
		{replyError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), "unavailable"},
		{replyError("READONLY You can't write against a read only replica."), "unavailable"},
		{replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), "unavailable"},
		{replyError("NOREPLICAS Not enough good replicas to write."), "unavailable"},
		{replyError("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), "unavailable"},
		{replyError("NOAUTH Authentication required."), "unavailable"},
		{replyError("WRONGPASS invalid username-password pair or user is disabled."), "unavailable"},
		{replyError("ERR max number of clients reached"), "unavailable"},
		{replyError("NOPERM User x has no permissions to access the 'orders' key"), "transient"},
		{replyError("MOVED 3999 127.0.0.1:6381"), "transient"},
		{replyError("ERR The stream has exhausted the last possible ID, unable to add more items"), "transient"},
		{replyError("BUSYGROUP Consumer Group name already exists"), "transient"}, // not BUSY
		{fmt.Errorf("%w: WAIT 1 100 counted 0 replicas", ErrNotReplicated), "transient"},
		{refused, "unavailable"},
		{io.EOF, "unavailable"},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), "unavailable"},
		{fmt.Errorf("write: %w", syscall.EPIPE), "unavailable"},
		{os.ErrDeadlineExceeded, "unavailable"}, // an I/O timeout
		{context.DeadlineExceeded, "unavailable"},
		{redis.ErrClosed, "unavailable"},
		{redis.ErrPoolTimeout, "unavailable"},
		{ErrClosed, "unavailable"},
		{context.Canceled, "transient"},
		{errors.New("something else"), "transient"},
		{publishers.Permanent(io.EOF), "permanent"}, // already marked
	}
	for _, c := range cases {
		got := classify(c.err)
		if k := publishers.ClassOf(got).String(); k != c.want {
			t.Errorf("classify(%v) = %v: %s, want %s", c.err, got, k, c.want)
		}
		if c.err != nil && !errors.Is(got, c.err) {
			t.Errorf("classify(%v) = %v does not wrap the cause", c.err, got)
		}
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	shared := publishers.Unavailable(io.EOF)
	perm := publishers.Permanent(errors.New("WRONGTYPE"))
	transient := errors.New("transient")
	for _, c := range []struct {
		name    string
		results []error
		want    string // "nil", "single" or "each"
	}{
		{"all acknowledged", []error{nil, nil}, "nil"},
		{"one error shared by all", []error{transient, transient}, "single"},
		{"all unavailable, different errors", []error{shared, publishers.Unavailable(io.EOF)}, "single"},
		{"mixed", []error{nil, perm}, "each"},
		{"different failures", []error{transient, perm}, "each"},
		{"non-comparable error values", []error{publishers.Errors{io.EOF}, publishers.Errors{io.EOF}}, "each"},
	} {
		got := summarize(c.results)
		var each publishers.Errors
		switch {
		case c.want == "nil" && got != nil,
			c.want == "single" && (got == nil || errors.As(got, &each)),
			c.want == "each" && (!errors.As(got, &each) || len(each) != len(c.results)):
			t.Errorf("%s: summarize = %v, want %s", c.name, got, c.want)
		}
	}
}
