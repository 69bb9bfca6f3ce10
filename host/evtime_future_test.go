package host_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// One record stamped a year ahead (a device with a wrong clock) moves the watermark there for
// good: every session closes at once and every later record is late. With time.max_future the
// record goes to the dead letters with the reason, the watermark stays that of the others, and
// the outputs are those of the input without it.
func TestMaxFutureKeepsWatermark(t *testing.T) {
	module := guestbuild.Go(t, "sessions")
	sample, err := os.ReadFile(filepath.Join("..", "examples", "wasm", "sessions", "input.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSpace(string(sample)), "\n")
	// The clock of the runs below reads the sample's highest timestamp, as for a live feed.
	var last int64
	for _, l := range lines {
		var r struct{ Ts int64 }
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		last = max(last, r.Ts)
	}
	now := time.UnixMilli(last)
	future := `{"user":"mallory","ts":` + jsonInt(now.Add(365*24*time.Hour).UnixMilli()) + `,"page":"/clock-off"}` + "\n"
	skewed := strings.Join(lines[:4], "") + future + strings.Join(lines[4:], "") + "\n"

	dir := t.TempDir()
	run := func(name, text string, maxFuture time.Duration) (outs []string, dead []deadLetter) {
		t.Helper()
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		input := filepath.Join(d, "in.ndjson")
		if err := os.WriteFile(input, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		tc := host.TaskConfig{
			Name: "sessions", Module: module, Config: map[string]any{"gap_minutes": 30},
			Inputs:     []host.InputConfig{{Name: "in", Path: input, KeyField: "user", ValueField: "page", TimestampField: "ts"}},
			Output:     host.OutputConfig{Type: "file", Path: filepath.Join(d, "out.ndjson")},
			DeadLetter: host.DeadLetterConfig{Path: filepath.Join(d, "dead.ndjson")},
			Time:       host.TimeConfig{AllowedLateness: 5 * time.Minute, MaxFuture: maxFuture},
		}
		hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(d, "data"), CacheDir: hosttest.CompileCache(t),
			Logger: testLogger(t), Now: func() time.Time { return now }, Tasks: []host.TaskConfig{tc}})
		for _, o := range readOutputs(t, tc.Output.Path) {
			outs = append(outs, o.Output+" "+o.Key+" "+o.Value)
		}
		slices.Sort(outs)
		if _, err := os.Stat(tc.DeadLetter.Path); err == nil {
			dead = readDeadLetters(t, tc.DeadLetter.Path)
		}
		return outs, dead
	}

	want, dead := run("clean", string(sample), time.Hour)
	if len(dead) != 0 || len(want) == 0 {
		t.Fatalf("the sample: %d outputs, dead letters %+v", len(want), dead)
	}
	countLate := func(outs []string) int {
		n := 0
		for _, o := range outs {
			if strings.HasPrefix(o, "late ") {
				n++
			}
		}
		return n
	}

	// Without a bound, the record a year ahead makes the rest late (what max_future is for).
	got, _ := run("unbounded", skewed, 0)
	if l, w := countLate(got), countLate(want); l < w+10 {
		t.Fatalf("without max_future, %d late outputs (the sample alone: %d); want the records after the one a year ahead late:\n%s", l, w, strings.Join(got, "\n"))
	}

	got, dead = run("bounded", skewed, time.Hour)
	if !slices.Equal(got, want) {
		t.Errorf("with max_future the outputs differ from the sample's:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	if len(dead) != 1 || dead[0].Key != "mallory" || dead[0].Line != 5 ||
		!strings.Contains(dead[0].Error, "timestamp in the future") || !strings.Contains(dead[0].Error, "time.max_future (1h0m0s)") {
		t.Fatalf("dead letters %+v; want mallory's record, line 5, with the reason", dead)
	}
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
