// Package probe samples what bench measures around a step: the CPU time of processes
// and of the machine (/proc, read with procfs), the consumer groups' lag (Kafka's
// admin API) and the services' /metrics (expfmt).
package probe

import (
	"os"

	"github.com/prometheus/procfs"

	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
)

// CPU is the CPU seconds each watched process had used at one instant; the keys
// Machine and Steal are the whole machine's busy and stolen seconds, all cores.
type CPU map[string]float64

const (
	Machine = "machine"
	Steal   = "steal"
)

var proc, _ = procfs.NewDefaultFS()

// Process reads pid's user and system CPU seconds (every thread) and resident bytes.
func Process(fs procfs.FS, pid int) (seconds float64, rss int64, err error) {
	p, err := fs.Proc(pid)
	if err != nil {
		return 0, 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, 0, err
	}
	return st.CPUTime(), int64(st.ResidentMemory()), nil
}

// ProcessCPU is pid's CPU seconds, false when it cannot be read.
func ProcessCPU(pid int) (float64, bool) {
	s, _, err := Process(proc, pid)
	return s, err == nil
}

// RSS is pid's resident bytes, 0 when it cannot be read.
func RSS(pid int) int64 {
	_, rss, _ := Process(proc, pid)
	return rss
}

// Snapshot reads the CPU seconds of every named pid (0: skipped), of this process as
// "bench", and of the machine.
func Snapshot(pids map[string]int) CPU {
	snap := CPU{}
	for name, pid := range pids {
		if s, ok := ProcessCPU(pid); ok && pid != 0 {
			snap[name] = s
		}
	}
	if s, ok := ProcessCPU(os.Getpid()); ok {
		snap["bench"] = s
	}
	if st, err := proc.Stat(); err == nil {
		snap[Machine], snap[Steal] = busy(st.CPUTotal)
	}
	return snap
}

// busy is what ran (user, nice, system, irq, softirq; guest time is in user and nice)
// and what the hypervisor gave to other machines while this one wanted it.
func busy(c procfs.CPUStat) (busy, steal float64) {
	return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ, c.Steal
}

// MemoryBytes is the machine's memory, 0 when unknown.
func MemoryBytes() uint64 {
	if m, err := proc.Meminfo(); err == nil && m.MemTotal != nil {
		return *m.MemTotal * 1024
	}
	return 0
}

// Delta is end minus start per process present in both, so a process that restarted
// or vanished in between is left out rather than counted wrong.
func Delta(start, end CPU) map[string]float64 {
	d := map[string]float64{}
	for name, e := range end {
		if s, ok := start[name]; ok && e >= s {
			d[name] = e - s
		}
	}
	return d
}

// MachineOver turns a CPU delta over window seconds into the machine's use: busy,
// stolen, and busy in processes the delta does not name — other work on the machine.
func MachineOver(cpu map[string]float64, window float64) report.MachineCPU {
	b, ok := cpu[Machine]
	if !ok || window <= 0 {
		return report.MachineCPU{}
	}
	watched := 0.0
	for name, sec := range cpu {
		if name != Machine && name != Steal {
			watched += sec
		}
	}
	return report.MachineCPU{Known: true, BusyCores: b / window, StolenCores: cpu[Steal] / window,
		OtherCores: max(0, b-watched) / window}
}
