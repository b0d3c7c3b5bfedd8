package deploy_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// alertRule is one rule of the alerting rules file.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// loadAlerts reads the rules file the compose Prometheus loads: the one
// its prometheus.yml names under rule_files, from where compose mounts it.
func loadAlerts(t *testing.T) []alertRule {
	t.Helper()
	prom := loadCompose(t).Services["prometheus"]
	host, ok := prom.mount("/etc/prometheus/prometheus.yml")
	if !ok {
		t.Fatal("the prometheus service mounts no /etc/prometheus/prometheus.yml")
	}
	var cfg struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	readYAML(t, filepath.Join(composeDir, host), &cfg)
	if len(cfg.RuleFiles) != 1 {
		t.Fatalf("prometheus.yml loads rule files %q, want the alerts file", cfg.RuleFiles)
	}
	rules, ok := prom.mount(cfg.RuleFiles[0])
	if !ok {
		t.Fatalf("prometheus.yml loads %s, which compose does not mount", cfg.RuleFiles[0])
	}
	var file struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, filepath.Join(composeDir, rules), &file)
	var out []alertRule
	for _, g := range file.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// alertMetrics returns the outbox_* names the alerts' expressions use,
// each with the alerts using it.
func alertMetrics(rules []alertRule) map[string][]string {
	names := map[string][]string{}
	for _, r := range rules {
		for _, name := range outboxNameRE.FindAllString(promStringRE.ReplaceAllString(r.Expr, `""`), -1) {
			names[name] = append(names[name], r.Alert)
		}
	}
	return names
}

// The shipped alerts cover what an operator must hear about (the relays
// behind, a sink down, failed rows, leases lost, fenced write-backs), and
// each is complete: a severity, a summary and a description, a valid for.
// TestLiveRelayAsDeployed checks that a running relay exports every name
// they query.
func TestAlertRules(t *testing.T) {
	rules := loadAlerts(t)
	seen := map[string]bool{}
	for _, r := range rules {
		if r.Alert == "" || seen[r.Alert] {
			t.Errorf("alert %q: a name of its own is required", r.Alert)
		}
		seen[r.Alert] = true
		if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") || strings.Count(r.Expr, "[") != strings.Count(r.Expr, "]") {
			t.Errorf("alert %s: unbalanced brackets in %s", r.Alert, r.Expr)
		}
		if !slices.Contains([]string{"warning", "critical"}, r.Labels["severity"]) {
			t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s: a summary and a description are required", r.Alert)
		}
		if r.For != "" {
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
			}
		}
	}
	exprs := map[string]string{}
	for _, r := range rules {
		exprs[r.Expr] = r.Alert
	}
	for _, want := range []string{
		"outbox_oldest_due_age_seconds",
		"outbox_sink_outage",
		`outbox_backlog_rows{state="failed"}`,
		"outbox_leases_lost_total",
		`outbox_events_total{outcome="fenced"}`,
	} {
		found := false
		for expr := range exprs {
			found = found || strings.Contains(expr, want)
		}
		if !found {
			t.Errorf("no alert queries %s", want)
		}
	}
}
