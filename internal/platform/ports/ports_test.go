package ports

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// byVariable is every port by the variable that moves it, in deploy/local/topologies and
// docs/configuration.md.
var byVariable = map[string]int{
	"PULSE_INGEST_PORT":            Ingest,
	"PULSE_QUERY_PORT":             Query,
	"PULSE_AGGREGATOR_PORT":        Aggregator,
	"PULSE_HISTORY_PORT":           History,
	"PULSE_NOTIFIER_PORT":          Notifier,
	"PULSE_DEMO_PORT":              Demo,
	"PULSE_KAFKA_PORT":             Kafka,
	"PULSE_KAFKA_CONTROLLER_PORT":  KafkaController,
	"PULSE_CASSANDRA_PORT":         Cassandra,
	"PULSE_CASSANDRA_STORAGE_PORT": CassandraStorage,
	"PULSE_REDIS_PORT":             Redis,
}

func TestAddrs(t *testing.T) {
	if got := ListenAddr(Query); got != ":18081" {
		t.Errorf("ListenAddr(Query) = %q, want :18081", got)
	}
	if got := LocalAddr(Kafka); got != "127.0.0.1:19092" {
		t.Errorf("LocalAddr(Kafka) = %q, want 127.0.0.1:19092", got)
	}
	if got := LocalURL(Ingest); got != "http://127.0.0.1:18080" {
		t.Errorf("LocalURL(Ingest) = %q, want http://127.0.0.1:18080", got)
	}
}

// The local stack's table of topologies keeps its own defaults; the single topology's
// must be these constants, or services started without settings would look for servers
// on other ports. A cell "PULSE_KAFKA_PORT=19092" is $PULSE_KAFKA_PORT, 19092 by default.
func TestStackTopologyDefaultsAreTheseConstants(t *testing.T) {
	src, err := os.ReadFile("../../../deploy/local/topologies")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]int{}
	cell := regexp.MustCompile(`^(PULSE_[A-Z_]+_PORT)=([0-9]+)$`)
	column := -1
	for _, line := range strings.Split(string(src), "\n") {
		line, _, _ = strings.Cut(line, "#")
		cells := strings.Fields(line)
		if len(cells) == 0 {
			continue
		}
		if column < 0 {
			column = slices.Index(cells, "single")
			if column < 1 {
				t.Fatalf("deploy/local/topologies: the header %q has no column single", line)
			}
			continue
		}
		if column >= len(cells) {
			t.Errorf("deploy/local/topologies: row %q has no cell for single", line)
			continue
		}
		m := cell.FindStringSubmatch(cells[column])
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		if prev, ok := found[m[1]]; ok && prev != n {
			t.Errorf("deploy/local/topologies gives %s two defaults: %d and %d", m[1], prev, n)
		}
		found[m[1]] = n
	}
	for name, want := range byVariable {
		got, ok := found[name]
		switch {
		case !ok:
			t.Errorf("deploy/local/topologies has no default for %s in its single column (want %s=%d)", name, name, want)
		case got != want:
			t.Errorf("deploy/local/topologies: %s defaults to %d, internal/platform/ports to %d", name, got, want)
		}
	}
	for name := range found {
		if _, ok := byVariable[name]; !ok {
			t.Errorf("deploy/local/topologies has a port %s that internal/platform/ports does not know", name)
		}
	}
	// The script takes every port from the table, so the table is the one place to check.
	script, err := os.ReadFile("../../../deploy/local/stack.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\$\{(PULSE_[A-Z_]+_PORT):-[0-9]+\}`).FindAllStringSubmatch(string(script), -1) {
		t.Errorf("stack.sh gives %s a default of its own: it belongs in deploy/local/topologies", m[1])
	}
}

// docs/configuration.md's Ports table pairs each port with its variable: "| Kafka |
// 19092 (controller 19093) | `PULSE_KAFKA_PORT`, `PULSE_KAFKA_CONTROLLER_PORT` |".
func TestConfigDocPortsTableIsTheseConstants(t *testing.T) {
	src, err := os.ReadFile("../../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(src), "## Ports\n")
	if !ok {
		t.Fatal("docs/configuration.md has no ## Ports section")
	}
	var rows []string
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "|") {
			rows = append(rows, line)
		} else if len(rows) > 0 {
			break // the end of the first table
		}
	}
	seen := map[string]bool{}
	number := regexp.MustCompile(`\b[0-9]{4,5}\b`)
	variable := regexp.MustCompile("`(PULSE_[A-Z_]+)`")
	for _, row := range rows {
		cells := strings.Split(strings.Trim(row, "| "), "|")
		if len(cells) != 3 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") || strings.TrimSpace(cells[0]) == "what" {
			continue
		}
		nums := number.FindAllString(cells[1], -1)
		vars := variable.FindAllStringSubmatch(cells[2], -1)
		if len(nums) != len(vars) {
			t.Errorf("docs/configuration.md Ports row %q: %d ports for %d variables", row, len(nums), len(vars))
			continue
		}
		for i, v := range vars {
			n, _ := strconv.Atoi(nums[i])
			want, ok := byVariable[v[1]]
			switch {
			case !ok:
				t.Errorf("docs/configuration.md Ports row %q: %s is no port internal/platform/ports knows", row, v[1])
			case n != want:
				t.Errorf("docs/configuration.md Ports: %s is %d, internal/platform/ports says %d", v[1], n, want)
			}
			seen[v[1]] = true
		}
	}
	for name, port := range byVariable {
		if !seen[name] {
			t.Errorf("docs/configuration.md Ports table lacks %s (%d)", name, port)
		}
	}
}
