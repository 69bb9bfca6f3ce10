package main

import (
	"bufio"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// memLimitShare is the part of a cgroup's memory limit given to the Go collector as its soft
// limit: the rest is for what the collector does not count (memory-mapped files, the guests'
// linear memories) and for headroom.
const memLimitShare = 0.9

// memLimitApplied is what applyCgroupMemoryLimit set, for runHost to log.
var memLimitApplied struct {
	soft, cgroup int64
	file         string
}

// applyCgroupMemoryLimit sets the Go collector's soft memory limit to memLimitShare of the
// memory limit of the process's cgroup (a container's, or a systemd unit's MemoryMax), unless
// GOMEMLIMIT is set, in which case the runtime already follows it. Without it the heap may grow
// to twice its live size before a collection, and under a stream of new keys Badger's buffers
// alone take hundreds of MiB (docs/security.md, "Resource limits"): the kernel would kill the process
// rather than the collector work harder. main calls it: it changes the whole process.
func applyCgroupMemoryLimit() {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return
	}
	limit, file := cgroupMemoryLimit("/sys/fs/cgroup", "/proc/self/cgroup")
	if limit <= 0 {
		return
	}
	soft := int64(float64(limit) * memLimitShare)
	debug.SetMemoryLimit(soft)
	memLimitApplied.soft, memLimitApplied.cgroup, memLimitApplied.file = soft, limit, file
}

// logMemoryLimit logs the limit applyCgroupMemoryLimit set, if any.
func logMemoryLimit(log *slog.Logger) {
	if m := memLimitApplied; m.soft > 0 {
		log.Info("memory limit for the Go collector from the cgroup (set GOMEMLIMIT to choose another, GOMEMLIMIT=off for none)",
			"cgroup_limit", m.cgroup, "soft_limit", m.soft, "file", m.file)
	}
}

// cgroupMemoryLimit returns the memory limit in bytes of the cgroup that the file self (the
// format of /proc/self/cgroup) names, under the cgroup file system mounted at root, and the
// file it read: cgroup v2's memory.max, or v1's memory/memory.limit_in_bytes. Each is looked
// for at the process's own cgroup, then at the root (a container sees its own cgroup there).
// It returns 0 when there is no limit or it cannot tell.
func cgroupMemoryLimit(root, self string) (int64, string) {
	v2, v1 := "", ""
	if f, err := os.Open(self); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// hierarchy-ID:controllers:path
			parts := strings.SplitN(sc.Text(), ":", 3)
			if len(parts) != 3 {
				continue
			}
			switch {
			case parts[0] == "0" && parts[1] == "":
				v2 = parts[2]
			case slices.Contains(strings.Split(parts[1], ","), "memory"):
				v1 = parts[2]
			}
		}
		f.Close()
	}
	candidates := []string{
		filepath.Join(root, v2, "memory.max"),
		filepath.Join(root, "memory.max"),
		filepath.Join(root, "memory", v1, "memory.limit_in_bytes"),
		filepath.Join(root, "memory", "memory.limit_in_bytes"),
	}
	for _, path := range candidates {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, path
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 { // cgroup v1 says "no limit" with a huge number
			return 0, path
		}
		return n, path
	}
	return 0, ""
}
