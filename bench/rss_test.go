package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/store"
)

// memRow is one line of the memory table: a run of the wasmstream binary in a child process,
// whose peak RSS is the kernel's maximum resident set size of that process (wait4's rusage).
type memRow struct {
	task      string
	system    string
	rssMiB    float64
	rate, cpu float64
}

// distinctKeysRSS runs the binary with the Go wordcount over keys records of as many distinct
// keys (two words each), as e2e's BenchmarkDistinctKeys1M does.
func distinctKeysRSS(b *testing.B, bin, module string, keys int) memRow {
	dir := b.TempDir()
	writeLines(b, filepath.Join(dir, "in.ndjson"), keys, func(w *bufio.Writer, i int) {
		fmt.Fprintf(w, `{"user":"user%07d","ts":%d,"text":"alpha beta"}`+"\n", i, 1700000000000+i)
	})
	m := runBinary(b, bin, dir, module, keys)
	m.task = fmt.Sprintf("%s keys", count(keys))
	m.system = "wasmstream binary, Go wordcount (2 words per key), file source"
	return m
}

// pendingTimersRSS runs the binary with the timers test guest over keys records of as many
// distinct keys, each setting a processing-time timer a day ahead, as e2e's
// BenchmarkPendingTimers1M does, and checks that the store then holds keys pending timers.
func pendingTimersRSS(b *testing.B, bin, module string, keys int) memRow {
	dir := b.TempDir()
	at := time.Now().Add(24 * time.Hour).UnixMilli()
	writeLines(b, filepath.Join(dir, "in.ndjson"), keys, func(w *bufio.Writer, i int) {
		fmt.Fprintf(w, `{"user":"k%07d","ts":%d,"text":"set t p %d"}`+"\n", i, 1700000000000+i, at)
	})
	m := runBinary(b, bin, dir, module, keys)
	m.task = fmt.Sprintf("%s timers", count(keys))
	m.system = "wasmstream binary, Go timers guest (1 pending timer per key), file source"
	db, err := store.Open(filepath.Join(dir, "data", "state"), store.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if n, err := db.TimerCount("wc", 1); err != nil || n != keys {
		b.Fatalf("%d timers pending (err %v), want %d", n, err, keys)
	}
	return m
}

func writeLines(b *testing.B, path string, n int, line func(*bufio.Writer, int)) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := 0; i < n; i++ {
		line(w, i)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// runBinary runs `wasmstream run` over dir/in.ndjson with module as task "wc" and returns its
// peak RSS, records/s and CPU per record.
func runBinary(b *testing.B, bin, dir, module string, records int) memRow {
	cfg := fmt.Sprintf(`data_dir: %s
checkpoint_interval: 100ms
tasks:
  - name: wc
    module: %s
    workers: 2
    inputs:
      - name: words
        path: %s
        key_field: user
        value_field: text
        timestamp_field: ts
    output:
      type: file
      path: %s
`, filepath.Join(dir, "data"), module, filepath.Join(dir, "in.ndjson"), filepath.Join(dir, "out.ndjson"))
	path := filepath.Join(dir, "wasmstream.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command(bin, "run", "-c", path, "--log-level", "warn")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	wall := time.Since(start)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	// At exec, Linux keeps as the child's peak RSS the peak of the memory it was started in,
	// this process's (Go starts children with vfork): the figure is the child's own only when
	// it is above this process's peak.
	if self := peakRSSKiB(b); ru.Maxrss <= self {
		b.Fatalf("the child's peak RSS (%d KiB) does not exceed this process's (%d KiB): it is not the child's own", ru.Maxrss, self)
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return memRow{
		rssMiB: float64(ru.Maxrss) / 1024, // kB on Linux
		rate:   float64(records) / wall.Seconds(),
		cpu:    float64(cpu.Microseconds()) / float64(records),
	}
}

// peakRSSKiB returns this process's peak RSS (VmHWM in /proc/self/status) in KiB.
func peakRSSKiB(b *testing.B) int64 {
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				b.Fatalf("VmHWM %q: %v", v, err)
			}
			return n
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// count writes n as "1M" or "10k" when it is a round number of those, in digits otherwise.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}
