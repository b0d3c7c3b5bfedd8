package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/outboxrelay/outboxrelay/admin"
)

const replaySynopsis = `Usage: relay replay [flags] [ID...]

Puts sent rows back to pending, due at once with attempt 0, so that the relays publish
them again. Each keeps its event id (the outbox-event-id header), so consumers that drop
duplicates by it drop the copies: replay is for consumers that lost events or reset what
they had seen. Rows are chosen by ids (arguments or --id), or by --topic and a time range
(--sent-after/-before, --created-after/-before). Ids that retention already deleted fail
the whole replay, naming them. Only rows still sent when it runs change (safe while relays
run); it records who, when, what and how many in the audit trail, and asks for
confirmation on the terminal unless --yes: it then replays at most the number confirmed.

With ordered delivery, a replayed event keeps its place in its key's order: it goes out
before the key's events still unfinished, holding them back until it is sent, and after
the key's later events that were already sent (docs/ordering.md#replaying-sent-events).`

// replayNote is printed after a replay on a table served in order.
const replayNote = "ordered delivery is in use: each replayed event keeps its place in its key's order; it goes out\n" +
	"before the key's unfinished events, holding them back until it is sent, and after the key's later\n" +
	"events that were already sent, so consumers see it after them (docs/ordering.md#replaying-sent-events)"

func runReplay(ctx context.Context, args []string, getenv func(string) string, con console, stdout, stderr io.Writer) error {
	f := newFlags("relay replay", replaySynopsis, stdout, getenv)
	var (
		o             adminOptions
		ids, topics   []string
		created, sent timeRangeFlags
		limit         int
		dryRun, yes   bool
	)
	o.register(f, getenv)
	listFlag(f, &ids, "id", "event ids (comma-separated; may be repeated), as well as those given as arguments")
	listFlag(f, &topics, "topic", "only rows of these topics (comma-separated; may be repeated)")
	sent.register(f, "sent", "sent_at")
	created.register(f, "created", "created_at")
	f.Int(&limit, "limit", 0, "the most rows replayed, the first in id order (default all)")
	f.Bool(&dryRun, "dry-run", false, "change nothing; print how many rows would be replayed")
	f.Bool(&yes, "yes", false, "do not ask for confirmation")
	f.commandLineOnly("yes")
	if err := parseAdmin(f, &o, args, func(errs *problems) {
		ids = append(ids, f.args()...)
		checkIDs(ids, errs)
		if limit < 0 {
			errs.add(usageError("invalid value for --limit (%s): must not be negative", envName("limit")))
		}
		if len(ids) == 0 && (len(topics) == 0 || !created.set() && !sent.set()) {
			errs.add(usageError("relay replay needs ids, or --topic and a time range (--sent-after/-before or --created-after/-before)"))
		}
	}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	adm, closePool, err := o.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer closePool()
	filter := admin.ReplayFilter{IDs: ids, Topics: topics}
	if created.set() || sent.set() {
		now, err := adm.Now(ctx)
		if err != nil {
			return err
		}
		filter.Created, filter.Sent = created.resolve(now), sent.resolve(now)
	}
	opts := admin.ActionOptions{Limit: int64(limit), DryRun: dryRun}
	var res admin.Result
	var confirmed int64
	if !dryRun {
		// A dry run first: ids retention deleted are refused before anyone
		// is asked to confirm.
		res, err = adm.Replay(ctx, filter, admin.ActionOptions{Limit: int64(limit), DryRun: true})
		if err == nil && res.Rows == 0 {
			return report(stdout, o.json, admin.Result{Action: "replay", Skipped: res.Skipped}, "no sent rows match; nothing changed")
		}
		if err == nil && !yes {
			what := "replay " + plural(res.Rows, "sent row")
			err = confirm(con, stderr, what, fmt.Sprintf("Replay %s of %s?", plural(res.Rows, "sent row"), adm.Name()))
			// What was confirmed is the most that changes.
			confirmed, opts.Limit = res.Rows, res.Rows
		}
	}
	if err == nil {
		res, err = adm.Replay(ctx, filter, opts)
	}
	if nf := (*admin.NotFoundError)(nil); errors.As(err, &nf) && o.json {
		_ = writeJSON(stdout, struct {
			admin.Result
			NotFound []string `json:"not_found"`
		}{res, nf.IDs})
	}
	if err != nil {
		return err
	}
	var msg string
	if res.DryRun {
		msg = fmt.Sprintf("dry run: would replay %s of %s; nothing changed", plural(res.Rows, "sent row"), adm.Name())
	} else {
		msg = fmt.Sprintf("replayed %s of %s (audit entry %d)", plural(res.Rows, "sent row"), adm.Name(), res.AuditID) + unlikeConfirmed(res, confirmed, "sent")
	}
	if res.Ordered && res.Rows > 0 {
		msg += "\n" + replayNote
	}
	return report(stdout, o.json, res, msg)
}
