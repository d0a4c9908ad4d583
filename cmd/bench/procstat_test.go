package main

import (
	"strings"
	"testing"
)

// statLine builds a /proc/<pid>/stat line with the given command name and utime,
// stime and rss; the other fields are plausible constants.
func statLine(comm string, utime, stime, rss string) string {
	f := []string{"1234", "(" + comm + ")", "S", "1", "1234", "1234", "0", "-1", "4194560",
		"100", "0", "0", "0", utime, stime, "0", "0", "20", "0", "12", "0", "55", "987654", rss}
	f = append(f, strings.Fields("93824992231424 93824992330000 140737488346864 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")...)
	return strings.Join(f, " ") + "\n"
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		line string
		want procTimes
	}{
		{"plain", statLine("redis-server", "4213", "977", "16950"), procTimes{4213, 977, 16950}},
		{"spaces in the name", statLine("Kafka Server", "10", "20", "30"), procTimes{10, 20, 30}},
		{"parentheses in the name", statLine("a) b (c) 99 98", "7", "8", "9"), procTimes{7, 8, 9}},
		// A real line, from a Java process.
		{"real", "32557 (java) S 1 32556 32556 0 -1 1077936384 240651 2087 57 0 5702 1745 1 1 20 0 104 0 1046 5018136576 115401 18446744073709551615 1 1 0 0 0 0 0 3 16800975 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0",
			procTimes{5702, 1745, 115401}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat(tt.line)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("parseStat = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseStatErrors(t *testing.T) {
	for name, line := range map[string]string{
		"empty":         "",
		"no name":       "1234 S 1 2 3",
		"short":         "1234 (x) S 1 2 3 4 5",
		"bad utime":     statLine("x", "ten", "1", "1"),
		"negative time": statLine("x", "-5", "1", "1"),
	} {
		if _, err := parseStat(line); err == nil {
			t.Errorf("%s: parseStat(%q) succeeded", name, line)
		}
	}
}

func TestReadProcSelf(t *testing.T) {
	p, err := readProc("self")
	if err != nil {
		t.Fatal(err)
	}
	if p.RSSPages <= 0 {
		t.Fatalf("own RSS %d pages, want > 0", p.RSSPages)
	}
}

func TestCPUDelta(t *testing.T) {
	start := cpuSnapshot{"ingest": 10, "kafka": 100, "gone": 5, "restarted": 50}
	end := cpuSnapshot{"ingest": 12.5, "kafka": 130, "new": 3, "restarted": 1}
	got := cpuDelta(start, end)
	want := map[string]float64{"ingest": 2.5, "kafka": 30}
	if len(got) != len(want) {
		t.Fatalf("cpuDelta = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("cpuDelta[%s] = %v, want %v", k, got[k], v)
		}
	}
}

func TestParseCPULine(t *testing.T) {
	got, err := parseCPULine("cpu  542261 10 69128 253796 1755 5 4858 60101 7 0")
	if err != nil {
		t.Fatal(err)
	}
	want := machineTicks{Busy: 542261 + 10 + 69128 + 5 + 4858, Steal: 60101}
	if got != want {
		t.Fatalf("parseCPULine = %+v, want %+v", got, want)
	}
	for _, line := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 x 4 5 6 7 8"} {
		if _, err := parseCPULine(line); err == nil {
			t.Errorf("parseCPULine(%q) succeeded", line)
		}
	}
}

func TestMachineOver(t *testing.T) {
	cpu := map[string]float64{machineKey: 30, stealKey: 2, "redis": 4, "kafka": 6, "loadgen": 5}
	got := machineOver(cpu, 20)
	want := MachineCPU{Known: true, BusyCores: 1.5, OtherCores: 0.75, StolenCores: 0.1}
	if got != want {
		t.Fatalf("machineOver = %+v, want %+v", got, want)
	}
	if machineOver(map[string]float64{"redis": 1}, 10).Known {
		t.Fatal("machineOver without the machine's numbers is known")
	}
}
