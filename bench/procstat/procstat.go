package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// ClockTick is the unit of utime and stime in /proc/<pid>/stat: USER_HZ, which the kernel's
// ABI fixes at 100 per second on the architectures Go runs Linux on. It is also the
// resolution of every reading.
const ClockTick = 10 * time.Millisecond

// Times is a process's CPU time so far, summed over all its threads (live and exited).
type Times struct {
	User   time.Duration
	System time.Duration
}

// Total is user plus system time.
func (t Times) Total() time.Duration { return t.User + t.System }

// Sub is the CPU time used between an earlier reading and t.
func (t Times) Sub(earlier Times) Times {
	return Times{User: t.User - earlier.User, System: t.System - earlier.System}
}

// Read returns the CPU time process pid has used so far.
func Read(pid int) (Times, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Times{}, fmt.Errorf("procstat: %w", err)
	}
	t, err := Parse(b)
	if err != nil {
		return Times{}, fmt.Errorf("procstat: pid %d: %w", pid, err)
	}
	return t, nil
}

// Parse reads utime and stime (fields 14 and 15) from the contents of a /proc/<pid>/stat.
// The command name (field 2) is in parentheses and may hold spaces and parentheses itself,
// so the fields are counted from the last ')'.
func Parse(stat []byte) (Times, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return Times{}, fmt.Errorf("no ')' closing the command name in %q", clip(stat))
	}
	rest := bytes.Fields(stat[end+1:]) // rest[0] is field 3, the state
	const utime, stime = 14 - 3, 15 - 3
	if len(rest) <= stime {
		return Times{}, fmt.Errorf("%d fields after the command name, want at least %d", len(rest), stime+1)
	}
	var ticks [2]int64
	for i, f := range [2]int{utime, stime} {
		n, err := strconv.ParseInt(string(rest[f]), 10, 64)
		if err != nil || n < 0 {
			return Times{}, fmt.Errorf("field %d is %q, not a tick count", f+3, rest[f])
		}
		ticks[i] = n
	}
	return Times{User: time.Duration(ticks[0]) * ClockTick, System: time.Duration(ticks[1]) * ClockTick}, nil
}

func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}
