package host_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// BenchmarkIsolation (issue 6 §5) measures a healthy task's throughput alone, beside a fair
// CPU-bound neighbour (a healthy task whose records each spin for a while) and beside a hostile
// task whose every record loops until its CPU budget stops it, in one run, and reports each in
// records/s, the ratio hostile/alone and the ratio hostile/neighbour. Each task has one worker:
// a neighbour may take its share (one instance busy at a time); the second ratio near 1 means
// the hostile task costs the healthy one no more than a well-behaved busy neighbour does.
//
//	go test ./host -run '^$' -bench Isolation -benchtime 3x
func BenchmarkIsolation(b *testing.B) {
	healthy := guestbuild.Go(b, "testguests/order")
	hostile := guestbuild.Go(b, "testguests/hostile")
	const n = 20000
	recs, _ := orderInput(100, n, 200, 7)
	loops := make([][2]string, 2000)
	for i := range loops {
		loops[i] = [2]string{"h", "loop"}
	}
	busy := make([][2]string, 20000)
	for i := range busy {
		busy[i] = [2]string{"n" + strconv.Itoa(i%10), strconv.Itoa(i/10+1) + " 3000000"}
	}
	var alone, neighbour, beside float64
	runs := 0
	for b.Loop() {
		alone += isolationRun(b, healthy, recs, "", nil)
		neighbour += isolationRun(b, healthy, recs, healthy, busy)
		beside += isolationRun(b, healthy, recs, hostile, loops)
		runs++
	}
	alone, neighbour, beside = alone/float64(runs), neighbour/float64(runs), beside/float64(runs)
	b.ReportMetric(alone, "alone-records/s")
	b.ReportMetric(neighbour, "beside-busy-records/s")
	b.ReportMetric(beside, "beside-hostile-records/s")
	b.ReportMetric(beside/alone, "hostile/alone")
	b.ReportMetric(beside/neighbour, "hostile/busy")
	b.ReportMetric(0, "ns/op")
}

// isolationRun runs the healthy task over recs, beside a second task (module other over orecs)
// when other is set, and returns the healthy task's records/s (from start until it processed
// every record; the other task is then stopped).
func isolationRun(b *testing.B, healthy string, recs [][2]string, other string, orecs [][2]string) float64 {
	b.Helper()
	dir := b.TempDir()
	ot := kvTask("healthy", healthy, writeLines(b, mkdir(b, filepath.Join(dir, "healthy")), recs), filepath.Join(dir, "healthy.out.ndjson"))
	ot.Workers = 1
	tasks := []host.TaskConfig{ot}
	if other != "" {
		ht := kvTask("other", other, writeLines(b, mkdir(b, filepath.Join(dir, "other")), orecs), filepath.Join(dir, "other.out.ndjson"))
		ht.Workers = 1
		ht.MaxBatchRecords = 1
		ht.FuelPerRecord = 30_000_000
		ht.Retry = host.RetryConfig{MaxAttempts: 1, Backoff: time.Millisecond, MaxBackoff: time.Millisecond, OnExhausted: "skip"}
		tasks = append(tasks, ht)
	}
	h, err := host.New(host.Config{DataDir: filepath.Join(dir, "data"), CheckpointInterval: 5 * time.Millisecond, Tasks: tasks})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- h.Run(ctx) }()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			cancel()
			b.Fatalf("the host stopped before the healthy task finished: %v", err)
		case <-tick.C:
		}
		if st := h.Stats(); len(st) == len(tasks) && st[0].Processed >= int64(len(recs)) {
			break
		}
	}
	elapsed := time.Since(start)
	st := h.Stats()
	cancel()
	<-done
	if other != "" && st[1].Processed+st[1].Failures == 0 {
		b.Fatalf("the other task ran nothing: %+v", st[1])
	}
	return float64(len(recs)) / elapsed.Seconds()
}
