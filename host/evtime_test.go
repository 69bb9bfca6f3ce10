package host_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/evtimetest"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// Event time you can trust (issue 23): for a deterministic guest the outputs per key and the
// final state are a function of the input alone, whatever the read-ahead, batch size, number of
// workers or input speed. The testguests/expire guest counts a key's records and re-arms an
// event-time timer at the record's time plus a gap with every record; the firing emits the count.
// evModel computes what it must give, independently of the host.

// evOutputs reads the output file: each key's values in order.
func evOutputs(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	outs := map[string][]string{}
	for _, m := range parseJSONLines(t, data) {
		key, _ := m["key"].(string)
		v, _ := m["value"].(string)
		outs[key] = append(outs[key], v)
	}
	return outs
}

// evState reads the task's final state.
func evState(t *testing.T, dataDir, task string) map[string]map[string]string {
	t.Helper()
	r, err := host.OpenState(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st := map[string]map[string]string{}
	err = r.Scan(task, nil, false, func(e host.StateEntry) bool {
		if st[string(e.Key)] == nil {
			st[string(e.Key)] = map[string]string{}
		}
		st[string(e.Key)][string(e.Name)] = string(e.Value)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// evSetting is one way of running the same input.
type evSetting struct {
	name  string
	stdin bool // fed through stdin one record at a time, each processed before the next is written
	tune  func(*host.TaskConfig)
}

var evSettings = []evSetting{
	{name: "file-defaults"},
	{name: "file-workers4-batch64-queued16", tune: func(tc *host.TaskConfig) {
		tc.Workers, tc.MaxBatchRecords, tc.MaxQueued = 4, 64, 16
	}},
	{name: "file-workers1-batch1-queued2", tune: func(tc *host.TaskConfig) {
		tc.Workers, tc.MaxBatchRecords, tc.MaxKeyRecords, tc.MaxQueued = 1, 1, 1, 2
	}},
	{name: "file-workers2-keyrecords256-queued100000", tune: func(tc *host.TaskConfig) {
		tc.Workers, tc.MaxBatchRecords, tc.MaxKeyRecords, tc.MaxQueued = 2, 1024, 256, 100_000
	}},
	{name: "file-strict-order", tune: func(tc *host.TaskConfig) {
		tc.MaxInFlight = 1
	}},
	{name: "file-partition-sequencing", tune: func(tc *host.TaskConfig) {
		tc.Sequencing.Policy = host.SequenceByPartition
	}},
	{name: "stdin-slow", stdin: true},
}

// evRun runs recs through the expire guest under setting s and returns its outputs and state.
func evRun(t *testing.T, module string, recs []evtimetest.Rec, s evSetting) (map[string][]string, map[string]map[string]string) {
	t.Helper()
	dir := t.TempDir()
	in := host.InputConfig{Name: "in", KeyField: "k", ValueField: "v", TimestampField: "ts"}
	var stdin *io.PipeReader
	var feed *io.PipeWriter
	if s.stdin {
		in.Type = host.InputStdin
		stdin, feed = io.Pipe()
	} else {
		in.Path = filepath.Join(dir, "in.ndjson")
		if err := os.WriteFile(in.Path, evtimetest.Lines(recs, "k", "v", "ts"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tc := host.TaskConfig{
		Name: "ev", Module: module, Workers: 2,
		Inputs: []host.InputConfig{in},
		Output: host.OutputConfig{Type: host.OutputFile, Path: filepath.Join(dir, "out.ndjson")},
		Time:   host.TimeConfig{AllowedLateness: 30 * time.Second},
	}
	if s.tune != nil {
		s.tune(&tc)
	}
	cfg := host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc},
		CheckpointInterval: 20 * time.Millisecond}
	if !s.stdin {
		hosttest.RunToEnd(t, cfg)
	} else {
		cfg.Stdin = stdin
		r := hosttest.Start(t, cfg)
		w := bufio.NewWriter(feed)
		for i, line := range strings.SplitAfter(string(evtimetest.Lines(recs, "k", "v", "ts")), "\n") {
			if line == "" {
				continue
			}
			w.WriteString(line)
			w.Flush()
			// The next record is written once this one was processed: the slowest input.
			for evProcessed(r.Host) < int64(i+1) {
				select {
				case <-r.Done():
					t.Fatalf("host stopped after %d records: %v", i, r.Wait())
				case <-time.After(time.Millisecond):
				}
			}
		}
		feed.Close()
		if err := r.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	return evOutputs(t, filepath.Join(dir, "out.ndjson")), evState(t, cfg.DataDir, "ev")
}

func evProcessed(h *host.Host) int64 {
	for _, s := range h.Stats() {
		return s.Processed
	}
	return 0
}

func evCheck(t *testing.T, recs []evtimetest.Rec, settings []evSetting) {
	module := guestbuild.Go(t, "testguests/expire")
	wantOuts, wantState := evtimetest.Model(recs, evtimetest.Gap, evtimetest.Lateness)
	for _, s := range settings {
		t.Run(s.name, func(t *testing.T) {
			outs, state := evRun(t, module, recs, s)
			if d := evtimetest.Diff(wantOuts, outs); d != "" {
				t.Errorf("outputs differ from the reference model:\n%s", d)
			}
			if d := evtimetest.StateDiff(wantState, state); d != "" {
				t.Errorf("final state differs from the reference model:\n%s", d)
			}
		})
	}
}

// TestEventTimeMinimal is the minimal case under every setting: A emits 1, then 1.
func TestEventTimeMinimal(t *testing.T) {
	recs := evtimetest.Minimal()
	wantOuts, _ := evtimetest.Model(recs, evtimetest.Gap, evtimetest.Lateness)
	if got := strings.Join(wantOuts["A"], ", "); got != fmt.Sprintf("1 expire 1 %d, 2 expire 1 %d", evtimetest.T0+30*60_000, evtimetest.T0+80*60_000) {
		t.Fatalf("the reference model gives A %s", got)
	}
	evCheck(t, recs, evSettings)
}

// TestEventTimeDifferential runs a generated input of sessions, re-armed timers, deletes and
// late records under every setting: each run's outputs per key and final state must equal the
// reference model's (and so each other's).
func TestEventTimeDifferential(t *testing.T) {
	recs := evtimetest.NewGenerator(23).Next(4000)
	settings := evSettings
	if testing.Short() {
		settings = settings[:3]
	}
	// Through stdin, one record at a time, a shorter prefix of the input: it takes a checkpoint
	// interval per record.
	var slow []evSetting
	for _, s := range settings {
		if s.stdin {
			slow = append(slow, s)
		}
	}
	settings = slices.DeleteFunc(slices.Clone(settings), func(s evSetting) bool { return s.stdin })
	evCheck(t, recs, settings)
	if len(slow) > 0 {
		t.Run("prefix", func(t *testing.T) { evCheck(t, recs[:600], slow) })
	}
}

func parseJSONLines(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}
