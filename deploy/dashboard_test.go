package deploy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// dashboard is a Grafana dashboard, the fields the tests read.
type dashboard struct {
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title      string `json:"title"`
	Type       string `json:"type"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr       string `json:"expr"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T, file string) dashboard {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return d
}

// panels returns the dashboard's query panels, those of collapsed rows
// included.
func (d dashboard) panels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

var (
	// promStringRE matches PromQL string literals: label values are not
	// metric names.
	promStringRE = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	// outboxNameRE matches the relay's metric names.
	outboxNameRE = regexp.MustCompile(`\boutbox_[a-zA-Z0-9_:]*`)
)

// queriedMetrics returns the outbox_* names the dashboard's expressions
// use, each with the panels using it.
func (d dashboard) queriedMetrics() map[string][]string {
	names := map[string][]string{}
	for _, p := range d.panels() {
		for _, q := range p.Targets {
			for _, name := range outboxNameRE.FindAllString(promStringRE.ReplaceAllString(q.Expr, `""`), -1) {
				names[name] = append(names[name], p.Title)
			}
		}
	}
	return names
}

// TestDashboardCoversTheIssue: the dashboard has a query for each thing
// the operations issue asks it to show.
func TestDashboardCoversTheIssue(t *testing.T) {
	d := loadDashboard(t, "compose/grafana/dashboards/outbox-relay.json")
	names := d.queriedMetrics()
	if len(names) == 0 {
		t.Fatal("the dashboard queries no outbox_ metric")
	}
	for _, want := range []string{
		"outbox_backlog_rows",                        // backlog by state
		"outbox_oldest_due_age_seconds",              // oldest due age
		"outbox_events_total",                        // events by outcome
		"outbox_publish_duration_seconds_bucket",     // publish latency quantiles
		"outbox_event_age_at_publish_seconds_bucket", // age at publish
		"outbox_sink_outage",                         // outage state
		"outbox_leases_lost_total",                   // leases lost
		"outbox_janitor_deleted_rows_total",          // janitor deletes
		"outbox_ordered_shards_held",                 // ordered shards
	} {
		if len(names[want]) == 0 {
			t.Errorf("no panel queries %s", want)
		}
	}
	for _, p := range d.panels() {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.Count(q.Expr, "(") != strings.Count(q.Expr, ")") || strings.Count(q.Expr, "[") != strings.Count(q.Expr, "]") {
				t.Errorf("panel %q: unbalanced brackets in %s", p.Title, q.Expr)
			}
		}
	}
	t.Logf("%d panels query %d metrics: %s", len(d.panels()), len(names), strings.Join(sortedKeys(names), " "))
}

// scrape is a Prometheus text exposition: family types and the names of
// the samples present.
type scrape struct {
	types   map[string]string // family -> counter, gauge, histogram, ...
	samples map[string]int    // sample name -> lines
}

func parseScrape(text string) scrape {
	s := scrape{types: map[string]string{}, samples: map[string]int{}}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			if len(f) == 4 {
				s.types[f[2]] = f[3]
			}
		case line == "" || strings.HasPrefix(line, "#"):
		default:
			name := line
			if i := strings.IndexAny(line, "{ "); i >= 0 {
				name = line[:i]
			}
			s.samples[name]++
		}
	}
	return s
}

// missing returns the queried names the scrape lacks: a name must have
// samples; a histogram's _bucket, _sum and _count (and the bare family
// name, which PromQL cannot query but a typo could give) count as its
// family's.
func (s scrape) missing(queried map[string][]string) []string {
	var out []string
	for _, name := range sortedKeys(queried) {
		if s.samples[name] > 0 {
			continue
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
