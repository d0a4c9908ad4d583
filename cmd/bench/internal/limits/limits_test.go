package limits

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

func TestParsePerfLine(t *testing.T) {
	w, ok := parsePerfLine("249601 records sent, 49920.2 records/sec (6.28 MB/sec), 3.5 ms avg latency, 150.0 ms max latency.")
	if !ok || w.Final || w.Records != 249601 || w.RecordsPerSec != 49920.2 || w.MBPerSec != 6.28 || w.AvgMs != 3.5 || w.MaxMs != 150 {
		t.Fatalf("window line: %+v, %v", w, ok)
	}
	f, ok := parsePerfLine("1000000 records sent, 51234.567890 records/sec (6.45 MB/sec), 12.34 ms avg latency, 345.00 ms max latency, 10 ms 50th, 30 ms 95th, 40 ms 99th, 50 ms 99.9th.\n")
	if !ok || !f.Final || f.Records != 1000000 || f.RecordsPerSec != 51234.56789 || f.AvgMs != 12.34 || f.MaxMs != 345 {
		t.Fatalf("final line: %+v, %v", f, ok)
	}
	for _, junk := range []string{"", "Reading payloads from: /tmp/p.txt", "Number of messages read: 2000",
		"SLF4J: Class path contains multiple SLF4J bindings.", "12 records sent, 3,5 records/sec (0,00 MB/sec), 1.0 ms avg latency, 2.0 ms max latency."} {
		if l, ok := parsePerfLine(junk); ok {
			t.Errorf("%q parsed as %+v", junk, l)
		}
	}
}

func TestSummarizePerf(t *testing.T) {
	lines := []perfLine{
		{Records: 10, RecordsPerSec: 2, MBPerSec: 0.1, AvgMs: 900, MaxMs: 5000}, // warm-up: left out
		{Records: 100, RecordsPerSec: 20, MBPerSec: 2, AvgMs: 10, MaxMs: 50},    // 5 s
		{Records: 300, RecordsPerSec: 60, MBPerSec: 6, AvgMs: 20, MaxMs: 40},    // 5 s
	}
	// sum adds up lines into a fresh result.
	sum := func(lines []perfLine, skip int) (*report.KafkaLimit, error) {
		var s report.KafkaLimit
		return &s, summarizePerf(&s, lines, skip)
	}
	s, err := sum(lines, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.Windows != 2 || s.Records != 400 || s.Seconds != 10 || s.RecordsPerSec != 40 || s.MBPerSec != 4 || s.MaxLatencyMs != 50 {
		t.Fatalf("summary %+v", s)
	}
	if want := (100*10 + 300*20) / 400.0; math.Abs(s.AvgLatencyMs-want) > 1e-9 {
		t.Errorf("avg latency %v, want %v (weighted by records)", s.AvgLatencyMs, want)
	}
	if _, err := sum(lines[:1], 1); err == nil {
		t.Error("one window: want an error")
	}
	// A run that ended by itself with one window and its final line is taken whole.
	s, err = sum([]perfLine{lines[1], {Records: 500, RecordsPerSec: 50, MBPerSec: 5, AvgMs: 7, Final: true}}, 1)
	if err != nil || s.Windows != 1 || s.Records != 500 || s.RecordsPerSec != 50 || s.Seconds != 10 || s.AvgLatencyMs != 7 {
		t.Fatalf("final only: %+v, %v", s, err)
	}
	// Three warm-up windows: only the fourth on counts.
	s, err = sum(append(lines, perfLine{Records: 1000, RecordsPerSec: 100}), 3)
	if err != nil || s.Windows != 1 || s.Records != 1000 || s.RecordsPerSec != 100 {
		t.Fatalf("skip 3: %+v, %v", s, err)
	}
}

func TestKafkaPayloads(t *testing.T) {
	file, value, record, err := kafkaPayloads(1000, 50, time.Unix(1_800_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(file), "\n"), "\n")
	if len(lines) != 50 {
		t.Fatalf("%d lines, want 50", len(lines))
	}
	if !utf8.Valid(file) {
		t.Error("payloads are not UTF-8")
	}
	var total int
	for _, l := range lines {
		total += len(l)
	}
	if got := float64(total) / 50; got != record {
		t.Errorf("mean line %v bytes, reported record size %v", got, record)
	}
	// Key, schema header and value: the value alone is most of it, but not all.
	if !(value > 50 && record > value+5 && record < value+60) {
		t.Errorf("value %v B, record %v B", value, record)
	}
}

func TestFoldASCII(t *testing.T) {
	got := foldASCII([]byte{0x00, 0x0a, 0x8a, 0x41, 0xff})
	want := []byte{0x00, 0x0b, 0x0b, 0x41, 0x7f}
	if !bytes.Equal(got, want) {
		t.Errorf("fold = %x, want %x", got, want)
	}
}

// TestPackCQL checks the packing the minimal writer takes from historystore.
func TestPackCQL(t *testing.T) {
	key := func(n int) *historystore.Partition {
		return &historystore.Partition{Writes: make([]historystore.Write, n)}
	}
	sizes := func(g []*historystore.Batch) []int {
		var out []int
		for _, r := range g {
			out = append(out, len(r.Writes))
		}
		return out
	}
	// 3 keys per request at most, 5 statements at most; a key of 7 is split.
	got := sizes(historystore.Pack([]*historystore.Partition{key(1), key(1), key(1), key(1), key(7), key(2), key(4)}, 5, 3))
	want := []int{3, 5, 5, 4} // [1 1 1], [5 of the 7], [1 + 2 left + 2], [4]
	if len(got) != len(want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("requests %v, want %v", got, want)
		}
	}
}
