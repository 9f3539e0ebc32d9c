package loadbench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of the CPU times in /proc (100 on every
// Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// ProcSample is what /proc says about one process at one moment.
type ProcSample struct {
	CPU time.Duration // user + system
	// WriteCalls counts write-family system calls (/proc/pid/io syscw):
	// one per response written, plus one per request sent to Redis,
	// PostgreSQL or the upstream. Per request it tells network round trips
	// apart from answers made from memory.
	WriteCalls uint64
	RSS        uint64 // bytes resident now
	PeakRSS    uint64 // VmHWM: the most resident since the process started
}

// SampleProc reads /proc/pid/{stat,io,status}.
func SampleProc(pid int) (ProcSample, error) {
	var s ProcSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return s, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	s.CPU = time.Duration(ut+st) * clockTick

	if io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		s.WriteCalls = procField(io, "syscw:")
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	s.RSS = procField(status, "VmRSS:") << 10
	s.PeakRSS = procField(status, "VmHWM:") << 10
	return s, nil
}

// SampleTree is SampleProc of pid plus that of each of its direct
// children; RSS and peak RSS are summed too (an upper bound of the peak).
func SampleTree(pid int) (ProcSample, error) {
	s, err := SampleProc(pid)
	if err != nil {
		return s, err
	}
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return s, nil // a kernel without the file: the process alone
	}
	for _, f := range strings.Fields(string(kids)) {
		k, _ := strconv.Atoi(f)
		if ks, err := SampleProc(k); err == nil {
			s.CPU += ks.CPU
			s.WriteCalls += ks.WriteCalls
			s.RSS += ks.RSS
			s.PeakRSS += ks.PeakRSS
		}
	}
	return s, nil
}

// procField returns the first number after name in a /proc key: value file.
func procField(b []byte, name string) uint64 {
	i := bytes.Index(b, []byte(name))
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+len(name):]))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseUint(f[0], 10, 64)
	return v
}

// HostCPU is the CPU time every process on the machine used (all cores),
// from /proc/stat: the load generator, the upstream, the gateway, Redis,
// PostgreSQL — and whatever else runs.
func HostCPU() (busy time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseHostCPU(b)
}

// parseHostCPU sums the first line of /proc/stat: user, nice, system, irq
// and softirq. Not idle and iowait; not steal (time the hypervisor gave
// another guest, used by nothing on this machine); not guest and
// guest_nice (time this machine ran guests of its own, already counted in
// user and nice).
func parseHostCPU(b []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var total uint64
	for i, v := range f[1:] {
		switch i {
		case 0, 1, 2, 5, 6: // user nice system irq softirq
			n, _ := strconv.ParseUint(v, 10, 64)
			total += n
		}
	}
	return time.Duration(total) * clockTick, nil
}

// LoadAvg returns the 1-minute load average.
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
