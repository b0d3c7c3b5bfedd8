package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxrelay/outboxrelay/admin"
)

func runStatus(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlags("relay status", "Usage: relay status [flags]\n\n"+
		"Prints the outbox table's rows by state and topic, how long the oldest due row has waited,\n"+
		"the relays connected, holding rows and recently sending, the shard leases of ordered delivery\n"+
		"and the retention janitor. It only reads, through the partial indexes of the states it counts:\n"+
		"its cost follows the backlog and the failed rows, not the sent rows.\n\n"+
		"On MySQL/MariaDB it reads the same through the indexes that lead with the status; it lists the\n"+
		"sessions connected only when the server has performance_schema on, and there are no shards or\n"+
		"partitions.", stdout, getenv)
	var o adminOptions
	o.register(f, getenv)
	var exact bool
	f.Bool(&exact, "exact-sent", false, "count the sent rows exactly however many (an index-only scan of every sent row); without it, beyond 10,000 the count is the planner's estimate")
	if err := parseAdmin(f, &o, args, func(errs *problems) {
		if len(f.args()) > 0 {
			errs.add(usageError("unexpected arguments %q", f.args()))
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
	s, err := adm.Status(ctx, admin.StatusOptions{ExactSent: exact})
	if err != nil {
		return err
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	printStatus(stdout, s)
	return nil
}

// printStatus writes s as tables; the text that comes from the database
// (topics, relay names, client addresses) is escaped for the terminal.
func printStatus(w io.Writer, s *admin.Status) {
	fmt.Fprintf(w, "%s at %s (database clock)\n\n", s.Table, stamp(s.At))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	t := s.Totals
	sent := fmt.Sprint(*t.Sent)
	if !t.SentExact {
		sent = fmt.Sprintf("~%d (estimate; --exact-sent counts)", *t.Sent)
	}
	fmt.Fprintln(tw, "STATE\tROWS\t")
	fmt.Fprintf(tw, "pending, due\t%d\t%s\n", t.PendingDue, ageNote("oldest due for ", s.OldestDueSeconds))
	fmt.Fprintf(tw, "pending, later\t%d\tretries in backoff and delayed events\n", t.PendingDelayed)
	fmt.Fprintf(tw, "processing\t%d\t%s\n", t.Processing, lapsedNote(t.Lapsed, s.OldestLapsedSeconds))
	fmt.Fprintf(tw, "failed\t%d\t%s\n", t.Failed, parkedNote(t.Parked))
	oldest := ""
	if s.OldestSentAt != nil {
		oldest = "oldest sent " + secs(s.At.Sub(*s.OldestSentAt).Seconds()) + " ago"
	}
	fmt.Fprintf(tw, "sent\t%s\t%s\n", sent, oldest)
	tw.Flush()

	if len(s.Topics) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "TOPIC\tDUE\tLATER\tPROCESSING\tFAILED\tOLDEST DUE")
		for _, tc := range s.Topics {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", safeText(tc.Topic), tc.PendingDue, tc.PendingDelayed, tc.Processing, tc.Failed, ageNote("", tc.OldestDueSeconds))
		}
		tw.Flush()
	}

	fmt.Fprintln(w)
	if s.SessionsNote != "" {
		fmt.Fprintln(w, "relays connected: "+s.SessionsNote)
	} else if len(s.Sessions) == 0 {
		fmt.Fprintln(w, "relays connected: none (relay run names its sessions \""+admin.DefaultSessionPrefix+"<relay id>\")")
	} else {
		fmt.Fprintln(tw, "RELAY CONNECTED\tSESSIONS\tSINCE\tFROM\tSEEN ON THIS TABLE")
		for _, c := range s.Sessions {
			here := "no (another table, or idle)"
			if c.ServesTable {
				here = "yes"
			}
			since := secs(c.SinceSecs) + " ago"
			if s.Dialect == "mysql" {
				since = "-" // MySQL does not record when a session connected
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", safeText(c.Relay), c.Connections, since, safeText(dash(c.Clients)), here)
		}
		tw.Flush()
	}
	if len(s.Holders) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "RELAY HOLDING ROWS\tROWS\tCLAIMS\tLEASES END IN")
		for _, h := range s.Holders {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s .. %s\n", safeText(h.Relay), h.Rows, h.Claims, secs(h.FirstLeaseEnd), secs(h.LastLeaseEnd))
		}
		tw.Flush()
	}
	if len(s.RecentSenders) > 0 {
		fmt.Fprintln(w)
		var n int64
		for _, r := range s.RecentSenders {
			n += r.Rows
		}
		fmt.Fprintf(tw, "RELAY SENDING\tOF THE LATEST %d SENT\tLAST SENT\n", n)
		for _, r := range s.RecentSenders {
			fmt.Fprintf(tw, "%s\t%d\t%s ago\n", safeText(r.Relay), r.Rows, secs(r.LastSentSeconds))
		}
		tw.Flush()
	}

	fmt.Fprintln(w)
	switch {
	case s.Dialect == "mysql":
		// MySQL has no ordered delivery: nothing to say.
	case s.Ordered == nil:
		fmt.Fprintln(w, "ordered delivery: not in use (the shard table is empty)")
	default:
		fmt.Fprintf(w, "ordered delivery: %d shards, %d leased\n", s.Ordered.Shards, len(s.Ordered.Leased))
		if len(s.Ordered.Leased) > 0 {
			fmt.Fprintln(tw, "SHARD\tHELD BY\tLEASE ENDS IN\tIN FLIGHT")
			for _, sh := range s.Ordered.Leased {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\n", sh.Shard, safeText(sh.HeldBy), secs(sh.LeaseEnd), sh.InFlight)
			}
			tw.Flush()
		}
	}
	for _, j := range s.Jobs {
		fmt.Fprintf(w, "%s job: %s\n", j.Job, jobLine(j))
	}
	if s.Partitions != nil {
		fmt.Fprintf(w, "partitions: %d\n", len(s.Partitions))
		fmt.Fprintln(tw, "PARTITION\tFROM\tTO\tROWS (ESTIMATE)\tSIZE")
		for _, p := range s.Partitions {
			from, to := "default", ""
			if p.From != nil {
				from, to = p.From.UTC().Format(time.RFC3339), p.To.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", safeText(p.Name), from, to, p.Rows, bytesText(p.Bytes))
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "sink outage: "+s.SinkOutage)
}

func ageNote(prefix string, s *float64) string {
	if s == nil {
		return ""
	}
	return prefix + secs(*s)
}

func lapsedNote(n int64, oldest *float64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d with a lapsed lease (oldest ended %s ago): their relay died or froze; the next claim takes them back", n, secs(*oldest))
}

func parkedNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d parked (ordered delivery, --head-of-line park); relay failed list shows them", n)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// jobLine describes a periodic job's row.
func jobLine(j admin.Job) string {
	var parts []string
	if j.Running {
		parts = append(parts, "running, held by "+safeText(j.LastRunBy))
	} else if j.LastStartedSeconds == nil {
		parts = append(parts, "never ran")
	} else {
		parts = append(parts, "idle, last run by "+safeText(j.LastRunBy))
	}
	if j.LastStartedSeconds != nil {
		parts = append(parts, "started "+secs(*j.LastStartedSeconds)+" ago")
	}
	if j.LastFinishedSeconds != nil && !j.Running {
		parts = append(parts, "finished "+secs(*j.LastFinishedSeconds)+" ago")
	}
	if j.LastDeleted != nil && j.Job != "partitions" {
		parts = append(parts, fmt.Sprintf("deleted %d (%d in all)", *j.LastDeleted, j.TotalDeleted))
	}
	switch {
	case j.NextRunSeconds > 0:
		parts = append(parts, "next run in "+secs(j.NextRunSeconds))
	case j.Job == "partitions":
		parts = append(parts, "due now (any relay runs it)")
	default:
		parts = append(parts, "due now (a relay without --keep-sent runs it)")
	}
	return strings.Join(parts, ", ")
}

// bytesText is a size in MiB with one decimal, or bytes below a MiB.
func bytesText(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
