package host_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// Event time you can trust (issue 23): for a deterministic guest the outputs per key and the
// final state are a function of the input alone, whatever the read-ahead, batch size, number of
// workers or input speed. The testguests/expire guest counts a key's records and re-arms an
// event-time timer at the record's time plus a gap with every record; the firing emits the count.
// evModel computes what it must give, independently of the host.

// evRec is one input record: an "add" or "del" of key at ts.
type evRec struct {
	key string
	ts  int64
	cmd string
}

const evT0 = 1_800_000_000_000

// evMinimal is the minimal case: key A at t0; key B every minute from t0+1 min to
// t0+49 min; A at t0+50 min; B at t0+51 min. With a 30-minute gap and 30 s of allowed lateness,
// A's timer fires when B's t0+31 min record moves the watermark past t0+30 min: A emits 1, and
// 1 again at the end.
func evMinimal() []evRec {
	recs := []evRec{{"A", evT0, "add"}}
	for m := int64(1); m <= 49; m++ {
		recs = append(recs, evRec{"B", evT0 + m*60_000, "add"})
	}
	return append(recs, evRec{"A", evT0 + 50*60_000, "add"}, evRec{"B", evT0 + 51*60_000, "add"})
}

// evGenerate makes n records of sessions: 40 keys and a hot one, each active in bursts with
// pauses shorter and longer than the gap, event time advancing by 0–20 s per record; 3 % of the
// records are late (a few minutes behind the highest time so far), 2 % are deletes.
func evGenerate(seed uint64, n int) []evRec {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	ts := int64(evT0)
	maxTs := ts
	// Each key is asleep until wake: a burst ends with a pause of 5–60 minutes.
	wake := map[string]int64{}
	var recs []evRec
	for len(recs) < n {
		ts += rng.Int64N(20_000)
		var key string
		if rng.IntN(4) == 0 {
			key = "hot"
		} else {
			key = fmt.Sprintf("k%02d", rng.IntN(40))
		}
		if wake[key] > ts {
			continue
		}
		if rng.IntN(25) == 0 {
			wake[key] = ts + int64(5+rng.IntN(56))*60_000
		}
		r := evRec{key, ts, "add"}
		switch x := rng.IntN(100); {
		case x < 3:
			r.ts = maxTs - int64(1+rng.IntN(5))*60_000
		case x < 5:
			r.cmd = "del"
		}
		maxTs = max(maxTs, r.ts)
		recs = append(recs, r)
	}
	return recs
}

// evModel is the reference: one partition read in order, a watermark that is the highest
// timestamp read minus the lateness, never decreasing. A key's timer for T fires before the
// key's first record read once the watermark reached T (at the end of the input otherwise); a
// record is late when its timestamp is below the watermark as it was read.
func evModel(recs []evRec, gap, lateness int64) (outs map[string][]string, state map[string]map[string]string) {
	outs = map[string][]string{}
	type keyState struct {
		n, seq int64
		hasN   bool
		timer  int64 // -1: none
	}
	keys := map[string]*keyState{}
	emit := func(key string, k *keyState, what string) {
		k.seq++
		outs[key] = append(outs[key], fmt.Sprintf("%d %s", k.seq, what))
	}
	fire := func(key string, k *keyState) {
		emit(key, k, fmt.Sprintf("expire %d %d", k.n, k.timer))
		k.n, k.hasN, k.timer = 0, false, -1
	}
	wm := int64(-1)
	for off, r := range recs {
		k := keys[r.key]
		if k == nil {
			k = &keyState{timer: -1}
			keys[r.key] = k
		}
		if k.timer >= 0 && wm >= 0 && k.timer <= wm {
			fire(r.key, k)
		}
		if wm >= 0 && r.ts < wm {
			emit(r.key, k, fmt.Sprintf("late %d", off))
		}
		wm = max(wm, r.ts-lateness)
		switch r.cmd {
		case "add":
			k.n++
			k.hasN = true
			k.timer = r.ts + gap
		case "del":
			emit(r.key, k, fmt.Sprintf("del %d", k.n))
			k.n, k.hasN, k.timer = 0, false, -1
		}
	}
	state = map[string]map[string]string{}
	for key, k := range keys {
		if k.timer >= 0 {
			fire(key, k) // the end of the input: every timer fires
		}
		st := map[string]string{}
		if k.hasN {
			st["n"] = strconv.FormatInt(k.n, 10)
		}
		if k.seq > 0 {
			st["seq"] = strconv.FormatInt(k.seq, 10)
		}
		if len(st) > 0 {
			state[key] = st
		}
	}
	return outs, state
}

func evLines(recs []evRec) []byte {
	var b []byte
	for _, r := range recs {
		line, _ := json.Marshal(map[string]any{"k": r.key, "ts": r.ts, "v": r.cmd})
		b = append(append(b, line...), '\n')
	}
	return b
}

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

// evDiff describes how got differs from want, key by key (at most 10 keys).
func evDiff(want, got map[string][]string) string {
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	n := 0
	for _, k := range keys {
		if slices.Equal(want[k], got[k]) {
			continue
		}
		if n++; n > 10 {
			b.WriteString("...\n")
			break
		}
		i := 0
		for i < len(want[k]) && i < len(got[k]) && want[k][i] == got[k][i] {
			i++
		}
		fmt.Fprintf(&b, "key %s: %d outputs, want %d; first difference at %d: got %q, want %q\n",
			k, len(got[k]), len(want[k]), i, at(got[k], i), at(want[k], i))
	}
	return b.String()
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}

func evStateDiff(want, got map[string]map[string]string) string {
	flat := func(m map[string]map[string]string) map[string][]string {
		f := map[string][]string{}
		for k, names := range m {
			for n, v := range names {
				f[k] = append(f[k], n+"="+v)
			}
			slices.Sort(f[k])
		}
		return f
	}
	return evDiff(flat(want), flat(got))
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
func evRun(t *testing.T, module string, recs []evRec, s evSetting) (map[string][]string, map[string]map[string]string) {
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
		if err := os.WriteFile(in.Path, evLines(recs), 0o644); err != nil {
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
		for i, line := range strings.SplitAfter(string(evLines(recs)), "\n") {
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

func evCheck(t *testing.T, recs []evRec, settings []evSetting) {
	module := guestbuild.Go(t, "testguests/expire")
	wantOuts, wantState := evModel(recs, 30*60_000, 30_000)
	for _, s := range settings {
		t.Run(s.name, func(t *testing.T) {
			outs, state := evRun(t, module, recs, s)
			if d := evDiff(wantOuts, outs); d != "" {
				t.Errorf("outputs differ from the reference model:\n%s", d)
			}
			if d := evStateDiff(wantState, state); d != "" {
				t.Errorf("final state differs from the reference model:\n%s", d)
			}
		})
	}
}

// TestEventTimeMinimal is the minimal case under every setting: A emits 1, then 1.
func TestEventTimeMinimal(t *testing.T) {
	recs := evMinimal()
	wantOuts, _ := evModel(recs, 30*60_000, 30_000)
	if got := strings.Join(wantOuts["A"], ", "); got != fmt.Sprintf("1 expire 1 %d, 2 expire 1 %d", evT0+30*60_000, evT0+80*60_000) {
		t.Fatalf("the reference model gives A %s", got)
	}
	evCheck(t, recs, evSettings)
}

// TestEventTimeDifferential runs a generated input of sessions, re-armed timers, deletes and
// late records under every setting: each run's outputs per key and final state must equal the
// reference model's (and so each other's).
func TestEventTimeDifferential(t *testing.T) {
	recs := evGenerate(23, 4000)
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
