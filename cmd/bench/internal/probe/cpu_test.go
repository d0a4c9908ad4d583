package probe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
)

// statLine builds a /proc/<pid>/stat line with the given command name and utime,
// stime and rss; the other fields are plausible constants.
func statLine(comm string, utime, stime, rss string) string {
	f := []string{"1234", "(" + comm + ")", "S", "1", "1234", "1234", "0", "-1", "4194560",
		"100", "0", "0", "0", utime, stime, "0", "0", "20", "0", "12", "0", "55", "987654", rss}
	f = append(f, strings.Fields("93824992231424 93824992330000 140737488346864 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0")...)
	return strings.Join(f, " ") + "\n"
}

// statFS is a procfs whose process 1234 has line as its stat file.
func statFS(t *testing.T, line string) procfs.FS {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "1234"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "1234", "stat"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	fs, err := procfs.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestProcess reads utime, stime and rss with procfs, whose parsing of the command
// name (in parentheses, which it may itself hold, with spaces) bench relies on.
func TestProcess(t *testing.T) {
	type times struct{ utime, stime, rss int64 }
	tests := []struct {
		name string
		line string
		want times
	}{
		{"plain", statLine("redis-server", "4213", "977", "16950"), times{4213, 977, 16950}},
		{"spaces in the name", statLine("Kafka Server", "10", "20", "30"), times{10, 20, 30}},
		{"parentheses in the name", statLine("a) b (c) 99 98", "7", "8", "9"), times{7, 8, 9}},
		// A real line, from a Java process.
		{"real", "32557 (java) S 1 32556 32556 0 -1 1077936384 240651 2087 57 0 5702 1745 1 1 20 0 104 0 1046 5018136576 115401 18446744073709551615 1 1 0 0 0 0 0 3 16800975 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0",
			times{5702, 1745, 115401}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sec, rss, err := Process(statFS(t, tt.line), 1234)
			if err != nil {
				t.Fatal(err)
			}
			// procfs counts in USER_HZ, Linux's fixed 100 ticks a second.
			if want := float64(tt.want.utime+tt.want.stime) / 100; sec != want || rss != tt.want.rss*int64(os.Getpagesize()) {
				t.Fatalf("Process = %v s, %d B; want %v s, %d pages", sec, rss, want, tt.want.rss)
			}
		})
	}
}

func TestProcessErrors(t *testing.T) {
	for name, line := range map[string]string{
		"empty":         "",
		"no name":       "1234 S 1 2 3",
		"short":         "1234 (x) S 1 2 3 4 5",
		"bad utime":     statLine("x", "ten", "1", "1"),
		"negative time": statLine("x", "-5", "1", "1"),
	} {
		if _, _, err := Process(statFS(t, line), 1234); err == nil {
			t.Errorf("%s: Process(%q) succeeded", name, line)
		}
	}
}

func TestProcessSelf(t *testing.T) {
	if rss := RSS(os.Getpid()); rss <= 0 {
		t.Fatalf("own RSS %d bytes, want > 0", rss)
	}
}

func TestDelta(t *testing.T) {
	start := CPU{"ingest": 10, "kafka": 100, "gone": 5, "restarted": 50}
	end := CPU{"ingest": 12.5, "kafka": 130, "new": 3, "restarted": 1}
	got := Delta(start, end)
	want := map[string]float64{"ingest": 2.5, "kafka": 30}
	if len(got) != len(want) {
		t.Fatalf("Delta = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("Delta[%s] = %v, want %v", k, got[k], v)
		}
	}
}

func TestBusy(t *testing.T) {
	// cpu  542261 10 69128 253796 1755 5 4858 60101 7 0, as procfs reads it (seconds).
	c := procfs.CPUStat{User: 5422.61, Nice: 0.1, System: 691.28, Idle: 2537.96, Iowait: 17.55, IRQ: 0.05, SoftIRQ: 48.58, Steal: 601.01, Guest: 0.07}
	b, s := busy(c)
	if want := (542261 + 10 + 69128 + 5 + 4858) / 100.0; abs(b-want) > 1e-6 || s != 601.01 {
		t.Fatalf("busy = %v, %v; want %v, 601.01", b, s, want)
	}
}

func abs(v float64) float64 { return max(v, -v) }

func TestMachineOver(t *testing.T) {
	cpu := map[string]float64{Machine: 30, Steal: 2, "redis": 4, "kafka": 6, "loadgen": 5}
	got := MachineOver(cpu, 20)
	want := report.MachineCPU{Known: true, BusyCores: 1.5, OtherCores: 0.75, StolenCores: 0.1}
	if got != want {
		t.Fatalf("MachineOver = %+v, want %+v", got, want)
	}
	if MachineOver(map[string]float64{"redis": 1}, 10).Known {
		t.Fatal("MachineOver without the machine's numbers is known")
	}
}
