package host_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// Issue 6 §5, §6: a hostile task — infinite loops, emit storms, oversized emits and state
// values, traps — runs beside a healthy one in the same host. The healthy task processes every
// record, in order per key; every hostile record is dead-lettered with its limit named; the
// hostile task's other records and keys flow; and the host survives.
func TestHostileTaskBesideHealthy(t *testing.T) {
	hostile := guestbuild.Go(t, "testguests/hostile")
	healthy := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()

	bad := map[int]string{ // record index → what it does, and what its dead letter must say
		10:  "loop",
		50:  "emitstorm",
		90:  "bigemit",
		130: "statebomb",
		170: "loop",
		210: "recurse",
	}
	wantErr := map[string]string{
		"loop":      "call exceeded its CPU budget of 30000000 fuel units (fuel_per_record=30000000 × 1 records)",
		"recurse":   "", // stack overflow or fuel, whichever comes first: checked below
		"emitstorm": "ERR_LIMIT",
		"bigemit":   "ERR_TOO_LARGE",
		"statebomb": "ERR_TOO_LARGE",
	}
	var hrecs [][2]string
	for i := 0; i < 300; i++ {
		v := "v" + strconv.Itoa(i)
		if b, ok := bad[i]; ok {
			v = b
		}
		hrecs = append(hrecs, [2]string{"h" + strconv.Itoa(i%5), v})
	}
	hdir := filepath.Join(dir, "hostile")
	ht := kvTask("hostile", hostile, writeLines(t, mkdir(t, hdir), hrecs), filepath.Join(dir, "hostile.out.ndjson"))
	ht.Workers = 2
	ht.FuelPerRecord = 30_000_000
	ht.MaxBatchRecords = 16 // a looping record first spends the budget of its whole batch
	ht.MaxOutputsPerCall = 1000
	ht.Retry = host.RetryConfig{MaxAttempts: 2, Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
	ht.DeadLetter.Path = filepath.Join(dir, "hostile.dead.ndjson")

	orecs, perKey := orderInput(100, 5000, 2000, 7)
	odir := filepath.Join(dir, "healthy")
	ot := kvTask("healthy", healthy, writeLines(t, mkdir(t, odir), orecs), filepath.Join(dir, "healthy.out.ndjson"))
	ot.Workers = 2

	h, err := host.New(host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{ht, ot}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := h.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	elapsed := time.Since(start)

	// The healthy task: every record, in order per key.
	checkOrder(t, readOutputs(t, ot.Output.Path), perKey)

	// The hostile task: every good record echoed, every bad one dead-lettered with its limit.
	outs := readOutputs(t, ht.Output.Path)
	if len(outs) != len(hrecs)-len(bad) {
		t.Errorf("hostile task: %d outputs, want %d (every record but the %d hostile ones)", len(outs), len(hrecs)-len(bad), len(bad))
	}
	for _, o := range outs {
		if o.Output != "echo" || !strings.HasPrefix(o.Value, "v") {
			t.Errorf("unexpected output %+v", o)
		}
	}
	dead := readDeadLetters(t, ht.DeadLetter.Path)
	sort.Slice(dead, func(i, j int) bool { return dead[i].Offset < dead[j].Offset })
	if len(dead) != len(bad) {
		t.Fatalf("%d dead letters, want %d: %+v", len(dead), len(bad), dead)
	}
	for _, d := range dead {
		what, ok := bad[int(d.Offset)]
		if !ok || d.Record != what || d.Attempts != 2 {
			t.Errorf("dead letter %+v; want one of the hostile records after 2 attempts", d)
			continue
		}
		want := wantErr[what]
		if what == "recurse" {
			if !strings.Contains(d.Error, "stack overflow") && !strings.Contains(d.Error, "CPU budget") {
				t.Errorf("recurse: error %q; want a stack overflow or the CPU budget", d.Error)
			}
			continue
		}
		if !strings.Contains(d.Error, want) {
			t.Errorf("%s: error %q; want it to contain %q", what, d.Error, want)
		}
	}
	st := h.Stats()
	t.Logf("both tasks in %s; healthy: %d records (%.0f records/s beside the hostile task); hostile: %+v",
		elapsed.Round(time.Millisecond), st[1].Processed, float64(st[1].Processed)/elapsed.Seconds(), st[0])
}

func mkdir(t testing.TB, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
