package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var observabilityDir = filepath.Join(repo, "deploy", "observability")

// kafkaClientMetrics are the franz-go kprom counters internal/platform/kafkax registers under the
// pulse_kafka namespace (kprom's defaults; they are not spelt out in Pulse's code).
var kafkaClientMetrics = []string{
	"pulse_kafka_connects_total", "pulse_kafka_connect_errors_total", "pulse_kafka_disconnects_total",
	"pulse_kafka_write_errors_total", "pulse_kafka_write_bytes_total",
	"pulse_kafka_read_errors_total", "pulse_kafka_read_bytes_total",
}

// metricReaders are packages that name other services' metrics to read them, not to
// export them: query's pipeline view parses its peers' /metrics.
var metricReaders = []string{filepath.Join("services", "query", "dashboard")}

// exportedMetrics are the names the services' code registers: every quoted "pulse_…"
// string of a non-test Go file under services/ and internal/, metricReaders aside (and
// the notifier's, while its code is not in the tree: notifier_test.go).
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	quoted := regexp.MustCompile(`"(pulse_[a-z0-9_]+)"`)
	for _, dir := range []string{"services", "internal"} {
		err := filepath.WalkDir(filepath.Join(repo, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				for _, r := range metricReaders {
					if path == filepath.Join(repo, r) {
						return filepath.SkipDir
					}
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range quoted.FindAllStringSubmatch(string(b), -1) {
				names[m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	kafkax, err := os.ReadFile(filepath.Join(repo, "internal", "platform", "kafkax", "kafkax.go"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(kafkax), `kprom.NewMetrics("pulse_kafka"`) {
		for _, n := range kafkaClientMetrics {
			names[n] = true
		}
	}
	return names
}

// metricNames are the pulse_* series an expression reads, with a histogram's _bucket,
// _count and _sum taken back to its name.
func metricNames(expr string) []string {
	var out []string
	for _, n := range regexp.MustCompile(`\bpulse_[a-z0-9_]+`).FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && !strings.HasSuffix(n, "_total") {
				n = base
				break
			}
		}
		out = append(out, n)
	}
	return out
}

type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func TestDashboardQueriesExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	files, _ := filepath.Glob(filepath.Join(observabilityDir, "*.json"))
	if len(files) == 0 {
		t.Fatal("no dashboard in deploy/observability")
	}
	used := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		dec := json.NewDecoder(strings.NewReader(string(b)))
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: a dashboard needs a uid and a title", f)
		}
		ids := map[int]bool{}
		for _, p := range d.Panels {
			if ids[p.ID] {
				t.Errorf("%s: panel id %d twice", f, p.ID)
			}
			ids[p.ID] = true
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: panel %q does not use the ${datasource} variable", f, p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q queries nothing", f, p.Title)
			}
			for _, tg := range p.Targets {
				names := metricNames(tg.Expr)
				if len(names) == 0 {
					t.Errorf("%s: panel %q, query %s reads no pulse_ metric: %s", f, p.Title, tg.RefID, tg.Expr)
				}
				for _, n := range names {
					used[n] = true
					if !exported[n] {
						t.Errorf("%s: panel %q reads %s, which no service exports", f, p.Title, n)
					}
				}
			}
		}
	}
	// What the dashboard exists to show (the list), each by the metric that shows it.
	for _, n := range []string{
		"pulse_ingest_events_accepted_total", "pulse_ingest_produce_duration_seconds", // ingest rate and latency
		"pulse_consume_lag_records", "pulse_history_commit_lag_seconds", // lag in records and seconds
		"pulse_aggregator_flush_seconds", "pulse_feed_delivery_delay_seconds", // window duration, freshness
		"pulse_aggregator_retries_total", "pulse_history_write_duration_seconds", "pulse_history_write_retries_total", // Redis, Cassandra
		"pulse_feed_subscribers", "pulse_aggregator_dead_letters_total", "pulse_aggregator_rebuilds_total",
		// webhooks: deliveries, latency, backlog and lag per endpoint
		"pulse_notifier_deliveries_total", "pulse_notifier_latency_seconds",
		"pulse_notifier_backlog_changes", "pulse_notifier_oldest_pending_seconds",
	} {
		if !used[n] {
			t.Errorf("no panel reads %s", n)
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func TestAlertRulesQueryExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	b, err := os.ReadFile(filepath.Join(observabilityDir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(observabilityDir, "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			for _, m := range metricNames(r.Expr) {
				if !exported[m] {
					t.Errorf("alert %s reads %s, which no service exports", r.Alert, m)
				}
			}
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("alert %s: severity %q", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if r.Annotations[a] == "" {
					t.Errorf("alert %s has no %s", r.Alert, a)
				}
			}
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("alert %s has no promtool test in alerts_test.yaml", r.Alert)
			}
		}
	}
	if n < 8 {
		t.Errorf("%d alerts; want the lag, dead-letter, rebuild, readiness, 5xx and history ones", n)
	}
}
