package publishers

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

type codeError struct{ code int }

func (e *codeError) Error() string { return fmt.Sprintf("code %d", e.code) }

func TestPermanentAndUnavailable(t *testing.T) {
	t.Parallel()
	cause := &codeError{code: 7}
	cases := []struct {
		name        string
		err         error
		permanent   bool
		unavailable bool
		prefix      string
	}{
		{"plain", cause, false, false, "code 7"},
		{"permanent", Permanent(cause), true, false, "permanent: code 7"},
		{"unavailable", Unavailable(cause), false, true, "sink unavailable: code 7"},
		{"wrapped permanent", fmt.Errorf("publish: %w", Permanent(cause)), true, false, "publish: permanent: code 7"},
		{"wrapped unavailable", fmt.Errorf("publish: %w", Unavailable(cause)), false, true, "publish: sink unavailable: code 7"},
		{"unavailable of permanent", Unavailable(Permanent(cause)), true, true, "sink unavailable: permanent: code 7"},
		{"permanent of unavailable", Permanent(Unavailable(cause)), true, true, "permanent: sink unavailable: code 7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := IsPermanent(c.err); got != c.permanent {
				t.Errorf("IsPermanent = %v, want %v", got, c.permanent)
			}
			var p *PermanentError
			if got := errors.As(c.err, &p); got != c.permanent {
				t.Errorf("errors.As(*PermanentError) = %v, want %v", got, c.permanent)
			}
			if got := errors.Is(c.err, ErrUnavailable); got != c.unavailable {
				t.Errorf("errors.Is(ErrUnavailable) = %v, want %v", got, c.unavailable)
			}
			if !errors.Is(c.err, cause) {
				t.Errorf("errors.Is(cause) = false: the cause is lost")
			}
			var ce *codeError
			if !errors.As(c.err, &ce) || ce.code != 7 {
				t.Errorf("errors.As(*codeError) does not reach the cause")
			}
			if got := c.err.Error(); got != c.prefix {
				t.Errorf("Error() = %q, want %q", got, c.prefix)
			}
		})
	}
}

func TestPermanentUnwrap(t *testing.T) {
	t.Parallel()
	cause := errors.New("too large")
	var p *PermanentError
	if !errors.As(Permanent(cause), &p) || p.Err != cause || p.Unwrap() != cause || errors.Unwrap(p) != cause {
		t.Fatalf("Permanent(cause) does not unwrap to cause: %#v", p)
	}
}

func TestWrappersOfNilAreNil(t *testing.T) {
	t.Parallel()
	if err := Permanent(nil); err != nil {
		t.Errorf("Permanent(nil) = %#v, want nil", err)
	}
	if err := Unavailable(nil); err != nil {
		t.Errorf("Unavailable(nil) = %#v, want nil", err)
	}
	if IsPermanent(nil) {
		t.Error("IsPermanent(nil) = true")
	}
}

func TestPerMessage(t *testing.T) {
	t.Parallel()
	e1, e2 := errors.New("one"), Permanent(errors.New("two"))
	whole := errors.New("whole batch")
	cases := []struct {
		name string
		err  error
		n    int
		want []error
	}{
		{"nil", nil, 3, []error{nil, nil, nil}},
		{"nil of none", nil, 0, []error{}},
		{"Errors of right length", Errors{nil, e1, e2}, 3, []error{nil, e1, e2}},
		{"wrapped Errors", fmt.Errorf("kafka: %w", Errors{e1, nil}), 2, []error{e1, nil}},
		{"Errors all nil", Errors{nil, nil}, 2, []error{nil, nil}},
		{"Errors too short", Errors{e1}, 2, []error{Errors{e1}, Errors{e1}}},
		{"Errors too long", Errors{nil, e1, nil}, 2, []error{Errors{nil, e1, nil}, Errors{nil, e1, nil}}},
		{"plain error", whole, 3, []error{whole, whole, whole}},
		{"unavailable", Unavailable(whole), 2, []error{Unavailable(whole), Unavailable(whole)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := PerMessage(c.err, c.n)
			if len(got) != c.n {
				t.Fatalf("len = %d, want %d", len(got), c.n)
			}
			for i := range got {
				// Compare by text: the fallback repeats the very error given,
				// which for Errors is a slice and not comparable with ==.
				if (got[i] == nil) != (c.want[i] == nil) || got[i] != nil && got[i].Error() != c.want[i].Error() {
					t.Fatalf("[%d] = %v, want %v", i, got[i], c.want[i])
				}
			}
		})
	}
}

// PerMessage returns a fresh slice: changing it leaves the sink's Errors alone.
func TestPerMessageCopies(t *testing.T) {
	t.Parallel()
	e := errors.New("x")
	each := Errors{e, nil}
	got := PerMessage(each, 2)
	got[0] = nil
	if each[0] != e {
		t.Fatal("PerMessage returned the sink's own slice")
	}
}

func TestErrorsError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		errs Errors
		want string
	}{
		{"empty", Errors{}, "no errors"},
		{"all nil", Errors{nil, nil}, "no errors"},
		{"one of three", Errors{nil, errors.New("boom"), nil}, "1 of 3 messages failed; first: boom"},
		{"first failure is named", Errors{nil, errors.New("a"), errors.New("b")}, "2 of 3 messages failed; first: a"},
		{"all failed", Errors{errors.New("x"), errors.New("y")}, "2 of 2 messages failed; first: x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := c.errs.Error(); got != c.want {
				t.Fatalf("Error() = %q, want %q", got, c.want)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	euro := "€" // 3 bytes
	cases := []struct {
		name string
		err  error
		want string // "" means: only check the invariants
	}{
		{"plain", errors.New("broker said no"), "broker said no"},
		{"newlines", errors.New("line one\nline two\n"), "line one line two "},
		{"NUL bytes", errors.New("a\x00b\x00"), "ab"},
		{"invalid UTF-8", errors.New("bad \xff byte"), "bad ? byte"},
		{"exactly 1000 bytes", errors.New(strings.Repeat("x", 1000)), strings.Repeat("x", 1000)},
		{"1001 bytes", errors.New(strings.Repeat("x", 1001)), strings.Repeat("x", 1000) + "..."},
		// 999 ASCII bytes then a 3-byte rune: the cut at 1000 splits it.
		{"cut inside a rune", errors.New(strings.Repeat("x", 999) + strings.Repeat(euro, 10)), strings.Repeat("x", 999) + "?..."},
		{"cut inside many runes", errors.New(strings.Repeat(euro, 500)), ""},
		{"NUL removed before the cut", errors.New(strings.Repeat("\x00", 10) + strings.Repeat("y", 1000)), strings.Repeat("y", 1000)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := Describe(c.err)
			if c.want != "" && got != c.want {
				t.Fatalf("Describe = %q, want %q", got, c.want)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("Describe = %q: not valid UTF-8", got)
			}
			if strings.ContainsAny(got, "\n\x00") {
				t.Fatalf("Describe = %q: holds a newline or NUL", got)
			}
			if len(got) > 1003 {
				t.Fatalf("Describe returned %d bytes, want at most 1003", len(got))
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	if RetryAfter(nil, time.Second) != nil {
		t.Error("RetryAfter(nil) is not nil")
	}
	cause := errors.New("429 too many requests")
	err := fmt.Errorf("post: %w", RetryAfter(cause, 3*time.Second))
	if d, ok := RetryAfterOf(err); !ok || d != 3*time.Second {
		t.Errorf("RetryAfterOf = %v, %v; want 3s, true", d, ok)
	}
	if !errors.Is(err, cause) || IsPermanent(err) || errors.Is(err, ErrUnavailable) {
		t.Error("a RetryAfter error must wrap its cause and be transient")
	}
	if _, ok := RetryAfterOf(cause); ok {
		t.Error("RetryAfterOf found a wait in a plain error")
	}
}

func TestSummarize(t *testing.T) {
	down := Unavailable(errors.New("refused"))
	bad := Permanent(errors.New("too large"))
	if err := Summarize([]error{nil, nil}); err != nil {
		t.Errorf("all acknowledged: %v", err)
	}
	if err := Summarize([]error{down, down}); err != down {
		t.Errorf("all unavailable: %v; want the first error", err)
	}
	err := Summarize([]error{nil, bad})
	if each := PerMessage(err, 2); each[0] != nil || each[1] != bad {
		t.Errorf("mixed: %v; want an Errors that PerMessage gives back", err)
	}
}

// ClassOf sorts each kind of outcome, whatever wraps it, and a permanent
// error wins over an unavailable one inside it.
func TestClassOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want Class
		name string
	}{
		{nil, ClassAcknowledged, "acknowledged"},
		{errors.New("timeout"), ClassTransient, "transient"},
		{RetryAfter(errors.New("429"), time.Second), ClassTransient, "transient"},
		{Unavailable(errors.New("refused")), ClassUnavailable, "unavailable"},
		{fmt.Errorf("batch: %w", Unavailable(errors.New("refused"))), ClassUnavailable, "unavailable"},
		{Permanent(errors.New("too large")), ClassPermanent, "permanent"},
		{Permanent(Unavailable(errors.New("no stream"))), ClassPermanent, "permanent"},
	} {
		if got := ClassOf(tc.err); got != tc.want || got.String() != tc.name {
			t.Errorf("ClassOf(%v) = %v (%d), want %s", tc.err, got, got, tc.name)
		}
	}
	if s := Class(9).String(); s != "Class(9)" {
		t.Errorf("Class(9).String() = %q", s)
	}
}
