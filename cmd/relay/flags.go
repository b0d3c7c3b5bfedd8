package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
)

// errUsage is a bad command line or configuration: the binary exits 2 and
// prints each message on a line of its own.
type errUsage struct{ msgs []string }

func (e *errUsage) Error() string { return strings.Join(e.msgs, "\n") }

// usageError names the offending flag (and its environment variable).
func usageError(format string, args ...any) error {
	return &errUsage{[]string{fmt.Sprintf(format, args...)}}
}

// problems collects configuration errors, so that a command reports all of
// them at once instead of one per attempt.
type problems struct{ msgs []string }

// add records err; the messages of a usage error, and the errors err
// joins (a sink's Check), are kept one by one.
func (p *problems) add(err error) {
	var u *errUsage
	switch j, joined := err.(interface{ Unwrap() []error }); {
	case err == nil:
	case errors.As(err, &u):
		p.msgs = append(p.msgs, u.msgs...)
	case joined:
		for _, e := range j.Unwrap() {
			p.add(e)
		}
	default:
		p.msgs = append(p.msgs, err.Error())
	}
}

// err returns every recorded problem as one usage error, or nil.
func (p *problems) err() error {
	if len(p.msgs) == 0 {
		return nil
	}
	return &errUsage{p.msgs}
}

// flags is a flag.FlagSet in which every flag can also come from an
// environment variable: --batch-size from OUTBOX_BATCH_SIZE. A flag on the
// command line wins over the environment. Help goes to the writer given to
// newFlags (stdout), names flags --like-this and shows each one's variable.
type flags struct {
	fs       *flag.FlagSet
	getenv   func(string) string
	synopsis string
	help     io.Writer
	// bad holds the values the command line gave that did not parse, in
	// order: parsing goes on so that all are reported at once.
	bad problems
	// stopped is set when parse could not read the whole command line (an
	// unknown flag, a missing value): the settings are incomplete.
	stopped bool
	// sections group the flags in the help (help.go); nil: one list.
	sections []helpSection
}

// newFlags returns an empty flag set; --help prints synopsis and the flags
// to help.
func newFlags(name, synopsis string, help io.Writer, getenv func(string) string) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// The flag package's own messages name flags -like-this and go to
	// stderr before the caller could word them: parse words them instead.
	fs.SetOutput(io.Discard)
	f := &flags{fs: fs, getenv: getenv, synopsis: synopsis, help: help}
	// The flag package calls Usage on errors too; parse prints the help
	// only when it was asked for.
	fs.Usage = func() {}
	return f
}

// envName returns the environment variable for a flag.
func envName(flagName string) string { return sinks.EnvName(flagName) }

// value is a flag.Value that parses like the flag package's own values but
// whose errors say what was expected. A command-line value that does not
// parse is recorded in flags.bad and parsing goes on.
type value struct {
	f      *flags
	name   string
	kind   string // shown in the help: "int", "duration", "string"; "" for booleans
	set    func(string) error
	get    func() string
	isBool bool
	// cliOnly flags ignore their environment variable (commandLineOnly).
	cliOnly bool
}

func (v *value) String() string {
	if v == nil || v.get == nil {
		return ""
	}
	return v.get()
}

func (v *value) Set(s string) error {
	if err := v.set(s); err != nil {
		if v.cliOnly {
			v.f.bad.add(usageError("invalid value for --%s: %v", v.name, err))
		} else {
			v.f.bad.add(usageError("invalid value for --%s (%s): %v", v.name, envName(v.name), err))
		}
	}
	return nil
}

// IsBoolFlag lets a boolean flag stand alone: --keep-sent is --keep-sent=true.
func (v *value) IsBoolFlag() bool { return v.isBool }

func (f *flags) add(name, kind, usage string, set func(string) error, get func() string, isBool bool) {
	f.fs.Var(&value{f: f, name: name, kind: kind, set: set, get: get, isBool: isBool}, name, usage)
}

// commandLineOnly makes the registered flag name ignore its environment
// variable: --yes, which an exported variable would give every command of
// a shell, unseen.
func (f *flags) commandLineOnly(name string) { f.fs.Lookup(name).Value.(*value).cliOnly = true }

// env returns the value of the flag's environment variable, "" for a
// flag read from the command line only.
func (f *flags) env(name string) string {
	if fl := f.fs.Lookup(name); fl != nil && fl.Value.(*value).cliOnly {
		return ""
	}
	return f.getenv(envName(name))
}

// Expected formats, quoted in the errors of bad values.
const (
	expectDuration = "a duration such as 30s, 500ms or 1m30s (units ns, us, ms, s, m, h)"
	expectInt      = "a whole number such as 100"
	expectBool     = "true or false"
)

// Func registers a flag parsed by set and shown by get; kind names its
// value in the help.
func (f *flags) Func(name, kind, usage string, set func(string) error, get func() string) {
	f.add(name, kind, usage, set, get, false)
}

func (f *flags) String(p *string, name, def, usage string) {
	*p = def
	f.add(name, "string", usage, func(s string) error { *p = s; return nil }, func() string { return *p }, false)
}

// Strings registers a flag that may be repeated, each value appended to
// *p; its environment variable takes several values separated by spaces
// or newlines.
func (f *flags) Strings(p *[]string, name, usage string) {
	f.add(name, "rule", usage, func(s string) error {
		*p = append(*p, strings.Fields(s)...)
		return nil
	}, func() string { return strings.Join(*p, " ") }, false)
}

// isSet reports whether the flag was given on the command line or by its
// environment variable.
func (f *flags) isSet(name string) bool {
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set || f.env(name) != ""
}

func (f *flags) Int(p *int, name string, def int, usage string) {
	*p = def
	f.add(name, "int", usage, func(s string) error {
		n, err := strconv.ParseInt(s, 0, strconv.IntSize)
		switch {
		case errors.Is(err, strconv.ErrRange):
			return fmt.Errorf("%q is out of range", s)
		case err != nil:
			return fmt.Errorf("%q is not %s", s, expectInt)
		}
		*p = int(n)
		return nil
	}, func() string { return strconv.Itoa(*p) }, false)
}

func (f *flags) Bool(p *bool, name string, def bool, usage string) {
	*p = def
	f.add(name, "", usage, func(s string) error {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not %s", s, expectBool)
		}
		*p = b
		return nil
	}, func() string { return strconv.FormatBool(*p) }, true)
}

func (f *flags) Duration(p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	f.add(name, "duration", usage, func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not %s", s, expectDuration)
		}
		*p = d
		return nil
	}, func() string { return p.String() }, false)
}

// parse reads args, then the environment for flags not on the command line.
// It returns flag.ErrHelp for -h/--help (after printing the help), and a
// usage error listing every bad value, each naming its flag and variable.
// An unknown flag or a missing value stops parsing (stopped is set): the
// rest of the command line cannot be read.
func (f *flags) parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			section := "" // --help SECTION
			if len(f.fs.Args()) > 0 {
				section = f.fs.Arg(0)
			}
			if err := f.printHelp(f.help, section); err != nil {
				f.stopped = true
				return err
			}
			return flag.ErrHelp
		}
		f.stopped = true
		f.bad.add(usageError("%s; run \"%s --help\" for the flags", wordParseError(err), f.fs.Name()))
		return f.bad.err()
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	f.fs.VisitAll(func(fl *flag.Flag) {
		if set[fl.Name] {
			return
		}
		if s := f.env(fl.Name); s != "" {
			if err := fl.Value.(*value).set(s); err != nil {
				f.bad.add(usageError("invalid value for --%s from %s: %v", fl.Name, envName(fl.Name), err))
			}
		}
	})
	return f.bad.err()
}

// wordParseError rewords the flag package's errors, which name flags with
// one dash.
func wordParseError(err error) string {
	msg := err.Error()
	for prefix, say := range map[string]string{
		"flag provided but not defined: -": "unknown flag --",
		"flag needs an argument: -":        "missing value for --",
	} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			return say + strings.TrimPrefix(rest, "-")
		}
	}
	return msg
}

// fromEnv reports whether the flag's value came from its environment
// variable, not from the command line or the default.
func (f *flags) fromEnv(name string) bool {
	onCLI := false
	f.fs.Visit(func(fl *flag.Flag) { onCLI = onCLI || fl.Name == name })
	return !onCLI && f.env(name) != ""
}

// args returns the positional arguments after parse.
func (f *flags) args() []string { return f.fs.Args() }

// printFlags writes the synopsis, if any, the heading and the named
// flags, each --named, with its type, its environment variable, its
// meaning and its default.
func (f *flags) printFlags(w io.Writer, synopsis, heading string, names []string) {
	if synopsis != "" {
		fmt.Fprintf(w, "%s\n\nEvery flag can also be set by the environment variable shown in brackets;\na flag on the command line wins.\n\n", synopsis)
	}
	fmt.Fprintln(w, heading)
	for _, name := range names {
		fl := f.fs.Lookup(name)
		v := fl.Value.(*value)
		line := "  --" + fl.Name
		if v.kind != "" {
			line += " " + v.kind
		}
		env := envName(fl.Name)
		if v.cliOnly {
			env = "command line only"
		}
		fmt.Fprintf(w, "%s [%s]\n%s", line, env, wrap(fl.Usage+defaultNote(v.kind, fl.DefValue), "        ", 100))
	}
}

// wrap breaks text into lines of at most width columns (longer words stay
// whole), each starting with indent and ending with a newline.
func wrap(text, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(text) {
		if line != indent && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += word
	}
	b.WriteString(line + "\n")
	return b.String()
}

// defaultNote is " (default X)" unless the default is the zero value.
func defaultNote(kind, def string) string {
	switch {
	case def == "" || def == "false" || def == "0" || def == "0s":
		return ""
	case kind == "string":
		return fmt.Sprintf(" (default %q)", def)
	}
	return " (default " + def + ")"
}

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
