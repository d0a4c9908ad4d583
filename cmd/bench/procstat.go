package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// procTimes is what bench reads of a process from /proc/<pid>/stat.
type procTimes struct {
	UserTicks, SysTicks uint64 // utime and stime, in clock ticks, all threads included
	RSSPages            int64
}

// parseStat reads utime (field 14), stime (15) and rss (24) from one /proc/<pid>/stat
// line. The second field, the command name, is in parentheses and may itself hold
// spaces and parentheses, so fields are counted from the last ')'.
func parseStat(line string) (procTimes, error) {
	end := strings.LastIndexByte(line, ')')
	if end < 0 {
		return procTimes{}, fmt.Errorf("stat line without a command name: %q", truncate(line, 80))
	}
	f := strings.Fields(line[end+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	const utime, stime, rss = 14 - 3, 15 - 3, 24 - 3
	if len(f) <= rss {
		return procTimes{}, fmt.Errorf("stat line has %d fields after the name, want more than %d", len(f), rss)
	}
	var t procTimes
	var err error
	if t.UserTicks, err = strconv.ParseUint(f[utime], 10, 64); err != nil {
		return procTimes{}, fmt.Errorf("utime %q: %w", f[utime], err)
	}
	if t.SysTicks, err = strconv.ParseUint(f[stime], 10, 64); err != nil {
		return procTimes{}, fmt.Errorf("stime %q: %w", f[stime], err)
	}
	if t.RSSPages, err = strconv.ParseInt(f[rss], 10, 64); err != nil {
		return procTimes{}, fmt.Errorf("rss %q: %w", f[rss], err)
	}
	return t, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// readProc reads pid's times; "self" works too.
func readProc(pid string) (procTimes, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return procTimes{}, err
	}
	return parseStat(string(b))
}

// clockTicks is the kernel's clock ticks per second (USER_HZ), which /proc reports
// times in: getconf's answer, else Linux's fixed 100.
func clockTicks() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return float64(n)
		}
	}
	return 100
}

// machineTicks is the machine-wide line of /proc/stat, in clock ticks summed over
// every core.
type machineTicks struct {
	Busy  uint64 // user, nice, system, irq, softirq: what ran
	Steal uint64 // what the hypervisor gave to other machines while this one wanted it
}

// parseCPULine reads the first line of /proc/stat: "cpu user nice system idle iowait
// irq softirq steal guest guest_nice" (guest time is already in user and nice).
func parseCPULine(line string) (machineTicks, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineTicks{}, fmt.Errorf("not the machine-wide cpu line: %q", truncate(line, 80))
	}
	var v [8]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return machineTicks{}, fmt.Errorf("cpu field %d %q: %w", i+1, f[i+1], err)
		}
		v[i] = n
	}
	return machineTicks{Busy: v[0] + v[1] + v[2] + v[5] + v[6], Steal: v[7]}, nil
}

// machineCPU reads the machine's busy and stolen CPU seconds, all cores together.
func machineCPU(ticks float64) (busy, steal float64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	t, err := parseCPULine(line)
	if err != nil {
		return 0, 0, false
	}
	return float64(t.Busy) / ticks, float64(t.Steal) / ticks, true
}

// cpuSnapshot is the CPU seconds each watched process had used at one instant.
type cpuSnapshot map[string]float64

// cpuDelta is end minus start per process present in both, so a process that
// restarted or vanished in between is left out rather than counted wrong.
func cpuDelta(start, end cpuSnapshot) map[string]float64 {
	d := map[string]float64{}
	for name, e := range end {
		if s, ok := start[name]; ok && e >= s {
			d[name] = e - s
		}
	}
	return d
}
