package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/admin"
)

const failedSynopsis = `Usage: relay failed list|show|groups|retry|purge [flags] [ID...]

list    failed rows, a page at a time, oldest id first (payloads hidden unless --show-payload)
show    every field of the failed rows named by id
groups  failed rows grouped by topic and error, ids, numbers and quoted values aside;
        largest first, each with its fingerprint for --group
retry   puts failed rows back to pending: due at once, attempt 0; last_error is kept
        (--clear-error clears it) until the row is sent or fails again
purge   deletes failed rows

Rows are chosen by ids (arguments or --id) and the filters, which combine. retry and
purge need at least one of them, or --all; they change only rows still failed when
they run (safe while relays run), record who, when, what and how many in the audit
trail, and ask for confirmation on the terminal unless --yes (on the command line):
they then change at most the number of rows confirmed. --dry-run shows what they
would change. failed_at is when the relay failed the row; rows that failed before
migration 007 have none, and match no --failed-after or --failed-before.`

// failedOptions are relay failed's flags.
type failedOptions struct {
	adminOptions
	ids                                       []string
	topics                                    []string
	created, failed                           timeRangeFlags
	errorText, group                          string
	limit                                     int
	after                                     string
	showPayload, dryRun, yes, all, clearError bool
}

func runFailed(ctx context.Context, args []string, getenv func(string) string, con console, stdout, stderr io.Writer) error {
	f := newFlags("relay failed", failedSynopsis, stdout, getenv)
	var o failedOptions
	o.register(f, getenv)
	listFlag(f, &o.ids, "id", "event ids (comma-separated; may be repeated), as well as those given as arguments")
	listFlag(f, &o.topics, "topic", "only rows of these topics (comma-separated; may be repeated)")
	o.created.register(f, "created", "created_at")
	o.failed.register(f, "failed", "failed_at")
	f.String(&o.errorText, "error", "", "only rows whose last_error contains this text, in any case (no wildcards)")
	f.String(&o.group, "group", "", "list, retry, purge: only the rows of this failure group (a fingerprint, as relay failed groups prints)")
	f.Int(&o.limit, "limit", 0, "list: rows per page (default 50); retry, purge: the most rows changed, the first in id order (default all)")
	f.String(&o.after, "after", "", "list: the page after this id (the last id of the previous page)")
	f.Bool(&o.showPayload, "show-payload", false, "list, show: print the payloads")
	f.Bool(&o.dryRun, "dry-run", false, "retry, purge: change nothing; print how many rows would change")
	f.Bool(&o.yes, "yes", false, "retry, purge: do not ask for confirmation")
	f.commandLineOnly("yes")
	f.Bool(&o.all, "all", false, "retry, purge: every failed row, when no id or filter is given")
	f.Bool(&o.clearError, "clear-error", false, "retry: clear last_error (by default it is kept until the row is sent or fails again)")
	if len(args) == 0 {
		_ = f.printHelp(stderr, "")
		return usageError("failed needs a subcommand: list, show, groups, retry or purge")
	}
	sub := args[0]
	switch sub {
	case "-h", "-help", "--help":
		_ = f.printHelp(stdout, "")
		return flag.ErrHelp
	case "list", "show", "groups", "retry", "purge":
	default:
		return usageError("unknown failed subcommand %q: use list, show, groups, retry or purge", sub)
	}
	if err := parseAdmin(f, &o.adminOptions, args[1:], func(errs *problems) { o.check(sub, f, errs) }); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	adm, closePool, err := o.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer closePool()
	filter, err := o.filter(ctx, adm)
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		return o.list(ctx, adm, filter, stdout)
	case "show":
		return o.show(ctx, adm, filter, stdout)
	case "groups":
		return o.groups(ctx, adm, filter, stdout)
	}
	return o.act(ctx, adm, sub, filter, con, stdout, stderr)
}

// check reports the problems of the subcommand's flags.
func (o *failedOptions) check(sub string, f *flags, errs *problems) {
	o.ids = append(o.ids, f.args()...)
	checkIDs(o.ids, errs)
	if o.after != "" && !isUUID(o.after) {
		errs.add(usageError("invalid value for --after (%s): %q is not an event id (a UUID)", envName("after"), o.after))
	}
	if o.limit < 0 {
		errs.add(usageError("invalid value for --limit (%s): must not be negative", envName("limit")))
	}
	only := func(name string, set bool, subs ...string) {
		for _, s := range subs {
			if s == sub {
				return
			}
		}
		if set {
			errs.add(usageError("--%s (%s) does not apply to relay failed %s", name, envName(name), sub))
		}
	}
	if o.group != "" && !admin.IsFingerprint(o.group) {
		errs.add(usageError("invalid value for --group (%s): %q is not a failure group (16 hex digits, as relay failed groups prints)", envName("group"), o.group))
	}
	only("after", o.after != "", "list")
	only("show-payload", o.showPayload, "list", "show")
	only("dry-run", o.dryRun, "retry", "purge")
	only("all", o.all, "retry", "purge")
	only("clear-error", o.clearError, "retry")
	only("limit", o.limit != 0, "list", "retry", "purge")
	only("group", o.group != "", "list", "retry", "purge")
	switch {
	case sub == "show" && len(o.ids) == 0:
		errs.add(usageError("relay failed show needs ids"))
	case (sub == "retry" || sub == "purge") && !o.all && o.filterEmpty():
		errs.add(usageError("relay failed %s needs ids or a filter (--topic, --created-after/-before, --failed-after/-before, --error, --group), or --all for every failed row", sub))
	case o.all && !o.filterEmpty():
		errs.add(usageError("--all (%s) is for acting without ids or filters; drop it, or them", envName("all")))
	}
}

func (o *failedOptions) filterEmpty() bool {
	return len(o.ids) == 0 && len(o.topics) == 0 && !o.created.set() && !o.failed.set() && o.errorText == "" && o.group == ""
}

// filter builds the admin filter, relative times measured back from the
// database clock.
func (o *failedOptions) filter(ctx context.Context, adm *admin.Admin) (admin.Filter, error) {
	f := admin.Filter{IDs: o.ids, Topics: o.topics, ErrorContains: o.errorText, Group: o.group, All: o.all}
	if o.created.set() || o.failed.set() {
		now, err := adm.Now(ctx)
		if err != nil {
			return f, err
		}
		f.Created, f.Failed = o.created.resolve(now), o.failed.resolve(now)
	}
	return f, nil
}

func (o *failedOptions) list(ctx context.Context, adm *admin.Admin, filter admin.Filter, stdout io.Writer) error {
	rows, next, err := adm.ListFailed(ctx, filter, admin.Page{After: o.after, Limit: o.limit, WithPayload: o.showPayload})
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(stdout, struct {
			Rows      []admin.FailedRow `json:"rows"`
			NextAfter string            `json:"next_after"`
		}{nonNil(rows), next})
	}
	if len(rows) == 0 {
		fmt.Fprintln(stdout, "no failed rows match")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	head := "ID\tTOPIC\tATTEMPT\tCREATED\tFAILED\tERROR"
	if o.showPayload {
		head += "\tPAYLOAD"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		failed := "-"
		if r.FailedAt != nil {
			failed = stamp(*r.FailedAt)
		}
		line := fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", r.ID, safeText(r.Topic), r.Attempt, stamp(r.CreatedAt), failed, clip(safeText(flatten(r.LastError)), 60))
		if o.showPayload {
			line += "\t" + clip(printable(r.Payload), 60)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if next != "" {
		fmt.Fprintf(stdout, "%s; next page: --after %s\n", plural(int64(len(rows)), "row"), next)
	} else {
		fmt.Fprintf(stdout, "%s\n", plural(int64(len(rows)), "row"))
	}
	return nil
}

func (o *failedOptions) show(ctx context.Context, adm *admin.Admin, filter admin.Filter, stdout io.Writer) error {
	rows, _, err := adm.ListFailed(ctx, filter, admin.Page{Limit: len(o.ids), WithPayload: o.showPayload})
	if err != nil {
		return err
	}
	found := map[string]bool{}
	for _, r := range rows {
		found[r.ID] = true
	}
	var missing []string
	for _, id := range o.ids {
		if c := canonical(id); !found[c] {
			missing = append(missing, c)
			found[c] = true
		}
	}
	if o.json {
		if err := writeJSON(stdout, struct {
			Rows    []admin.FailedRow `json:"rows"`
			Missing []string          `json:"not_failed"`
		}{nonNil(rows), nonNil(missing)}); err != nil {
			return err
		}
	} else {
		for i, r := range rows {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			printFailedRow(stdout, r, o.showPayload)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s not among the failed rows (sent, pending, processing, or not in the table): %s",
			plural(int64(len(missing)), "id"), strings.Join(missing, ", "))
	}
	return nil
}

// groups prints the failure groups, largest first.
func (o *failedOptions) groups(ctx context.Context, adm *admin.Admin, filter admin.Filter, stdout io.Writer) error {
	groups, err := adm.FailureGroups(ctx, filter)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(stdout, struct {
			Groups []admin.FailureGroup `json:"groups"`
		}{nonNil(groups)})
	}
	if len(groups) == 0 {
		fmt.Fprintln(stdout, "no failed rows match")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tROWS\tTOPIC\tFIRST FAILED\tLAST FAILED\tPATTERN")
	for _, g := range groups {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", g.Fingerprint, g.Count, safeText(g.Topic), stamp(g.FirstFailed), stamp(g.LastFailed),
			clip(safeText(flatten(g.Pattern)), 100))
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%s; relay failed list|retry|purge --group GROUP acts on one\n", plural(int64(len(groups)), "group"))
	return nil
}

// printFailedRow writes every field of r, one per line.
func printFailedRow(w io.Writer, r admin.FailedRow, withPayload bool) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\n", r.ID)
	fmt.Fprintf(tw, "topic\t%s\n", safeText(r.Topic))
	key := "(none)"
	if r.Key != nil {
		key = printable(r.Key)
	}
	fmt.Fprintf(tw, "key\t%s\n", key)
	fmt.Fprintf(tw, "attempt\t%d\n", r.Attempt)
	fmt.Fprintf(tw, "created_at\t%s\n", stamp(r.CreatedAt))
	if r.FailedAt != nil {
		fmt.Fprintf(tw, "failed_at\t%s\n", stamp(*r.FailedAt))
	} else {
		fmt.Fprintf(tw, "failed_at\t(not recorded: failed before migration 007)\n")
	}
	fmt.Fprintf(tw, "headers\t%s\n", safeText(string(r.Headers)))
	fmt.Fprintf(tw, "last_error\t%s\n", safeText(flatten(r.LastError)))
	if withPayload {
		fmt.Fprintf(tw, "payload\t%s\n", printable(r.Payload))
	} else {
		fmt.Fprintf(tw, "payload\t%d bytes (--show-payload prints it)\n", r.PayloadSize)
	}
	tw.Flush()
}

// act runs retry or purge.
func (o *failedOptions) act(ctx context.Context, adm *admin.Admin, sub string, filter admin.Filter, con console, stdout, stderr io.Writer) error {
	opts := admin.ActionOptions{Limit: int64(o.limit), DryRun: o.dryRun, ClearError: o.clearError}
	do := adm.RetryFailed
	verb, done := "retry", "retried"
	if sub == "purge" {
		do, verb, done = adm.PurgeFailed, "purge", "purged"
	}
	var confirmed int64
	if !o.dryRun {
		dry, err := do(ctx, filter, admin.ActionOptions{Limit: opts.Limit, DryRun: true})
		if err != nil {
			return err
		}
		if dry.Rows == 0 {
			return report(stdout, o.json, admin.Result{Action: "failed." + sub, Skipped: dry.Skipped}, "no failed rows match; nothing changed")
		}
		if !o.yes {
			what := fmt.Sprintf("%s %s", verb, plural(dry.Rows, "failed row"))
			if err := confirm(con, stderr, what, fmt.Sprintf("%s of %s (%s)?", capitalize(what), adm.Name(), describeFilter(filter))); err != nil {
				return err
			}
			// What was confirmed is the most that changes.
			confirmed, opts.Limit = dry.Rows, dry.Rows
		}
	}
	res, err := do(ctx, filter, opts)
	if err != nil {
		return err
	}
	var msg string
	if res.DryRun {
		msg = fmt.Sprintf("dry run: would %s %s of %s; nothing changed", verb, plural(res.Rows, "failed row"), adm.Name())
	} else {
		msg = fmt.Sprintf("%s %s of %s (audit entry %d)", done, plural(res.Rows, "failed row"), adm.Name(), res.AuditID) + unlikeConfirmed(res, confirmed, "failed")
	}
	if sub == "retry" && res.Ordered && res.Rows > 0 {
		msg += "\nordered delivery is in use: each retried row goes out before the later unfinished events of its key,\n" +
			"and after those already sent (docs/ordering.md#parked-and-failed-events)"
	}
	if res.DryRun && !o.json && res.Rows > 0 {
		if err := report(stdout, false, res, msg); err != nil {
			return err
		}
		rows, _, err := adm.ListFailed(ctx, filter, admin.Page{Limit: int(min(res.Rows, 20))})
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTOPIC\tERROR")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.ID, safeText(r.Topic), clip(safeText(flatten(r.LastError)), 60))
		}
		tw.Flush()
		if res.Rows > int64(len(rows)) {
			fmt.Fprintf(stdout, "... and %d more (relay failed list shows them all)\n", res.Rows-int64(len(rows)))
		}
		return nil
	}
	return report(stdout, o.json, res, msg)
}

// report prints an action's result: JSON, or msg and the skipped ids.
func report(w io.Writer, asJSON bool, res admin.Result, msg string) error {
	if asJSON {
		return writeJSON(w, res)
	}
	fmt.Fprintln(w, msg)
	for _, s := range res.Skipped {
		state := s.State
		if state == "" {
			state = "not in the table"
		}
		fmt.Fprintf(w, "skipped %s: %s\n", s.ID, state)
	}
	return nil
}

// unlikeConfirmed says how the change res differs from the count
// confirmed (none: 0): fewer rows were still in the state, or more
// matched by then and were left alone.
func unlikeConfirmed(res admin.Result, confirmed int64, state string) string {
	switch {
	case confirmed == 0:
		return ""
	case res.Rows < confirmed:
		return fmt.Sprintf("\nnot changed: %d of the %d rows confirmed, no longer %s (another operator or a relay changed them since)", confirmed-res.Rows, confirmed, state)
	case res.Left > 0:
		return fmt.Sprintf("\nleft alone: %s that matched by then, beyond the %d confirmed; run the command again for them", plural(res.Left, state+" row"), confirmed)
	}
	return ""
}

// describeFilter says in words what a filter selects.
func describeFilter(f admin.Filter) string {
	var parts []string
	if len(f.IDs) > 0 {
		parts = append(parts, plural(int64(len(f.IDs)), "id"))
	}
	if len(f.Topics) > 0 {
		parts = append(parts, "topic "+strings.Join(f.Topics, ", "))
	}
	parts = append(parts, describeRange("created", f.Created)...)
	parts = append(parts, describeRange("failed", f.Failed)...)
	if f.ErrorContains != "" {
		parts = append(parts, "error containing "+strconv.Quote(f.ErrorContains))
	}
	if f.Group != "" {
		parts = append(parts, "failure group "+f.Group)
	}
	if len(parts) == 0 {
		return "every failed row"
	}
	return strings.Join(parts, ", ")
}

func describeRange(what string, r admin.TimeRange) []string {
	var out []string
	if !r.From.IsZero() {
		out = append(out, what+" at or after "+stamp(r.From))
	}
	if !r.To.IsZero() {
		out = append(out, what+" before "+stamp(r.To))
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// nonNil makes JSON print [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// printable shows bytes as text when they are printable UTF-8, and as
// base64 otherwise.
func printable(b []byte) string {
	if utf8.Valid(b) && strings.IndexFunc(string(b), func(r rune) bool { return !unicode.IsPrint(r) && !unicode.IsSpace(r) }) < 0 {
		return strconv.Quote(string(b))
	}
	return "base64:" + base64.StdEncoding.EncodeToString(b)
}

// safeText is s for a terminal: each rune that is not printable (control
// characters such as ESC and BEL, DEL, C1 controls, format characters) is
// written as its Go escape (\x1b, \a, \u009b) and each byte that is not
// UTF-8 as \xNN, so that text from the table cannot move the cursor, set
// the window title or clear the screen. --json carries the text exactly.
func safeText(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) }) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// flatten folds line breaks into spaces.
func flatten(s string) string { return strings.Join(strings.Fields(s), " ") }

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// checkIDs reports each id that is not a UUID.
func checkIDs(ids []string, errs *problems) {
	for _, id := range ids {
		if !isUUID(id) {
			errs.add(usageError("%q is not an event id (a UUID)", id))
		}
	}
}

// isFingerprint reports whether s is a failure group (admin.Fingerprint).
func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil
}

// canonical is the UUID s in its canonical form (s if it is none).
func canonical(s string) string {
	u, err := uuid.Parse(s)
	if err != nil {
		return s
	}
	return u.String()
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
