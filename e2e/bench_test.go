package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/store"
)

// BenchmarkDistinctKeys1M runs the real binary with the wasm wordcount over 1M records of 1M
// distinct keys and reports the process's peak RSS and throughput. Run with -benchtime 1x.
func BenchmarkDistinctKeys1M(b *testing.B) { benchDistinctKeys(b, 1_000_000) }

// BenchmarkDistinctKeys10M is the same over 10M records and keys: a store that grows by
// 100k+ keys a second for over a minute, so that Badger flushes and compacts all along and
// its write path's memory shows in the peak RSS (docs/security.md, "Resource limits"). Set GOMEMLIMIT
// in the environment to see its effect: the binary inherits it.
func BenchmarkDistinctKeys10M(b *testing.B) { benchDistinctKeys(b, 10_000_000) }

func benchDistinctKeys(b *testing.B, records int) {
	bin := guestbuild.Binary(b)
	module := guestbuild.Go(b, "wordcount")
	dir := b.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	f, err := os.Create(input)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := 0; i < records; i++ {
		fmt.Fprintf(w, `{"user":"user%08d","ts":%d,"text":"alpha beta"}`+"\n", i, 1700000000000+i)
	}
	w.Flush()
	f.Close()
	for i := 0; i < b.N; i++ {
		os.RemoveAll(filepath.Join(dir, "data"))
		cfg := writeConfig(b, dir, module, input, filepath.Join(dir, "out.ndjson"), "")
		start := time.Now()
		cmd := exec.Command(bin, "run", "-c", cfg, "--log-level", "warn")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		wall := time.Since(start)
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		b.ReportMetric(float64(ru.Maxrss)/1024, "peak-RSS-MiB")
		b.ReportMetric(float64(records)/wall.Seconds(), "rec/s")
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		b.ReportMetric(float64(cpu.Microseconds())/float64(records), "cpu-µs/rec")
	}
}

// BenchmarkPendingTimers1M runs the real binary with the timers test guest over 1M records of
// 1M distinct keys, each setting a processing-time timer a day ahead, so 1M timers are pending
// at the end. It reports the process's peak RSS, throughput, and how
// many timers the store holds. With -benchtime 1x.
func BenchmarkPendingTimers1M(b *testing.B) {
	benchPendingTimers(b, 1_000_000)
}

// BenchmarkPendingTimers10k is the same run with 10k keys, to compare per-record cost.
func BenchmarkPendingTimers10k(b *testing.B) {
	benchPendingTimers(b, 10_000)
}

func benchPendingTimers(b *testing.B, records int) {
	bin := guestbuild.Binary(b)
	module := guestbuild.Go(b, "testguests/timers")
	dir := b.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	f, err := os.Create(input)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := 0; i < records; i++ {
		// Processing-time timers a day ahead: pending when the input ends (processing-time
		// timers do not hold a finished input's task), durable in the store.
		fmt.Fprintf(w, `{"user":"k%07d","ts":%d,"text":"set t p %d"}`+"\n", i, 1700000000000+i, time.Now().Add(24*time.Hour).UnixMilli())
	}
	w.Flush()
	f.Close()
	for i := 0; i < b.N; i++ {
		os.RemoveAll(filepath.Join(dir, "data"))
		cfg := writeConfig(b, dir, module, input, filepath.Join(dir, "out.ndjson"), "")
		start := time.Now()
		cmd := exec.Command(bin, "run", "-c", cfg, "--log-level", "warn")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		wall := time.Since(start)
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		b.ReportMetric(float64(ru.Maxrss)/1024, "peak-RSS-MiB")
		b.ReportMetric(float64(records)/wall.Seconds(), "rec/s")
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		b.ReportMetric(float64(cpu.Microseconds())/float64(records), "cpu-µs/rec")
	}
	db, err := store.Open(filepath.Join(dir, "data", "state"), store.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	n, err := db.TimerCount("wc", 1)
	if err != nil || n != records {
		b.Fatalf("%d timers pending (err %v), want %d", n, err, records)
	}
}
