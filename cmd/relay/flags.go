package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// errUsage is a bad command line or configuration: the binary exits 2.
type errUsage struct{ msg string }

func (e *errUsage) Error() string { return e.msg }

// usageError names the offending flag (and its environment variable).
func usageError(format string, args ...any) error {
	return &errUsage{fmt.Sprintf(format, args...)}
}

// flags is a flag.FlagSet in which every flag can also come from an
// environment variable: --batch-size from OUTBOX_BATCH_SIZE. A flag on the
// command line wins over the environment.
type flags struct {
	fs     *flag.FlagSet
	getenv func(string) string
}

func newFlags(name, synopsis string, stderr io.Writer, getenv func(string) string) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &flags{fs: fs, getenv: getenv}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\n\nEvery flag can also be set by the environment variable shown in brackets.\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return f
}

// envName returns the environment variable for a flag.
func envName(flagName string) string {
	return "OUTBOX_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (f *flags) help(name, usage string) string {
	return usage + " [" + envName(name) + "]"
}

func (f *flags) String(p *string, name, def, usage string) {
	f.fs.StringVar(p, name, def, f.help(name, usage))
}

func (f *flags) Int(p *int, name string, def int, usage string) {
	f.fs.IntVar(p, name, def, f.help(name, usage))
}

func (f *flags) Bool(p *bool, name string, def bool, usage string) {
	f.fs.BoolVar(p, name, def, f.help(name, usage))
}

func (f *flags) Duration(p *time.Duration, name string, def time.Duration, usage string) {
	f.fs.DurationVar(p, name, def, f.help(name, usage))
}

// parse reads args, then the environment for flags not on the command line.
// It returns flag.ErrHelp for -h/--help and a usage error naming the flag
// for bad values.
func (f *flags) parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError("%v", err)
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var err error
	f.fs.VisitAll(func(fl *flag.Flag) {
		if set[fl.Name] || err != nil {
			return
		}
		if v := f.getenv(envName(fl.Name)); v != "" {
			if e := fl.Value.Set(v); e != nil {
				err = usageError("invalid value for --%s from %s: %v", fl.Name, envName(fl.Name), e)
			}
		}
	})
	return err
}

// args returns the positional arguments after parse.
func (f *flags) args() []string { return f.fs.Args() }

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
