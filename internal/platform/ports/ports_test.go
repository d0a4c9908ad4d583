package ports

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// byVariable is every port by the variable that moves it, in stack.sh and docs/configuration.md.
var byVariable = map[string]int{
	"PULSE_INGEST_PORT":            Ingest,
	"PULSE_QUERY_PORT":             Query,
	"PULSE_AGGREGATOR_PORT":        Aggregator,
	"PULSE_HISTORY_PORT":           History,
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

// The local stack's script keeps its own defaults; they must be these constants, or
// services started without settings would look for servers on other ports.
func TestStackScriptDefaultsAreTheseConstants(t *testing.T) {
	src, err := os.ReadFile("../../../deploy/local/stack.sh")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]int{}
	for _, m := range regexp.MustCompile(`\$\{(PULSE_[A-Z_]+_PORT):-([0-9]+)\}`).FindAllStringSubmatch(string(src), -1) {
		n, _ := strconv.Atoi(m[2])
		if prev, ok := found[m[1]]; ok && prev != n {
			t.Errorf("stack.sh gives %s two defaults: %d and %d", m[1], prev, n)
		}
		found[m[1]] = n
	}
	for name, want := range byVariable {
		got, ok := found[name]
		switch {
		case !ok:
			t.Errorf("stack.sh has no default for %s (want ${%s:-%d})", name, name, want)
		case got != want:
			t.Errorf("stack.sh: %s defaults to %d, internal/platform/ports to %d", name, got, want)
		}
	}
	for name := range found {
		if _, ok := byVariable[name]; !ok {
			t.Errorf("stack.sh has a port %s that internal/platform/ports does not know", name)
		}
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
