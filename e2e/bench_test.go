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
)

// BenchmarkDistinctKeys1M runs the real binary with the wasm wordcount over 1M records of 1M
// distinct keys and reports the process's peak RSS and throughput. Run with -benchtime 1x.
func BenchmarkDistinctKeys1M(b *testing.B) {
	const records = 1_000_000
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
		fmt.Fprintf(w, `{"user":"user%07d","ts":%d,"text":"alpha beta"}`+"\n", i, 1700000000000+i)
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
		b.ReportMetric(records/wall.Seconds(), "rec/s")
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		b.ReportMetric(float64(cpu.Microseconds())/records, "cpu-µs/rec")
	}
}
