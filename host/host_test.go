package host_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

type output struct {
	Output string `json:"output"`
	Key    string `json:"key"`
	Value  string `json:"value"`
	Ts     int64  `json:"ts"`
}

func readOutputs(t *testing.T, path string) []output {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var outs []output
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var o output
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		outs = append(outs, o)
	}
	return outs
}

// writeLines writes JSON lines {"k":..., "v":..., "ts":...} and returns the path.
func writeLines(t testing.TB, dir string, recs [][2]string) string {
	t.Helper()
	path := filepath.Join(dir, "input.ndjson")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i, r := range recs {
		b, _ := json.Marshal(map[string]any{"k": r[0], "v": r[1], "ts": 1_000 + i})
		w.Write(b)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

func kvTask(name, module, input, out string) host.TaskConfig {
	return host.TaskConfig{
		Name:   name,
		Module: module,
		Inputs: []host.InputConfig{{Name: "in", Path: input, KeyField: "k", ValueField: "v", TimestampField: "ts"}},
		Output: host.OutputConfig{Type: "file", Path: out},
	}
}

// orderInput makes n records over keys keys; each value is "<seq> <spin>" with a random spin so
// calls take random time, and seq counts the key's records from 1.
func orderInput(keys, n int, maxSpin int, seed uint64) (recs [][2]string, perKey map[string]int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	perKey = map[string]int{}
	for i := 0; i < n; i++ {
		k := "k" + strconv.Itoa(rng.IntN(keys))
		perKey[k]++
		recs = append(recs, [2]string{k, fmt.Sprintf("%d %d", perKey[k], rng.IntN(maxSpin+1))})
	}
	return recs, perKey
}

// checkOrder asserts that every key's outputs are exactly 1..n in order (S1).
func checkOrder(t *testing.T, outs []output, perKey map[string]int) {
	t.Helper()
	next := map[string]int{}
	for _, o := range outs {
		if strings.HasPrefix(o.Value, "violation") {
			t.Fatalf("key %s: the guest saw records out of order: %s", o.Key, o.Value)
		}
		seq, _ := strconv.Atoi(o.Value)
		if seq != next[o.Key]+1 {
			t.Fatalf("key %s: output %d after %d", o.Key, seq, next[o.Key])
		}
		next[o.Key] = seq
	}
	for k, n := range perKey {
		if next[k] != n {
			t.Fatalf("key %s: %d of %d outputs", k, next[k], n)
		}
	}
}

// S1, S3, S6: thousands of keys, several workers, random call durations, batches of many keys.
func TestPerKeyOrderUnderConcurrency(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()
	recs, perKey := orderInput(3000, 30_000, 20_000, 1)
	tc := kvTask("order", module, writeLines(t, dir, recs), filepath.Join(dir, "out.ndjson"))
	tc.Workers = 4
	tc.MaxBatchRecords = 64
	tc.MaxKeyRecords = 4
	hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	outs := readOutputs(t, filepath.Join(dir, "out.ndjson"))
	checkOrder(t, outs, perKey)
	// Keys did run concurrently: the output order is not the input order.
	inOrder := true
	for i := range outs {
		if outs[i].Ts != int64(1000+i) {
			inOrder = false
			break
		}
	}
	if inOrder {
		t.Error("with 4 workers the outputs came out in exact input order: keys did not run concurrently")
	}
}

// S3: with an in-flight limit of 1 the partition is processed strictly in order.
func TestStrictPartitionOrder(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()
	recs, perKey := orderInput(50, 3000, 5000, 2)
	tc := kvTask("strict", module, writeLines(t, dir, recs), filepath.Join(dir, "out.ndjson"))
	tc.Workers = 4
	tc.MaxInFlight = 1
	hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	outs := readOutputs(t, filepath.Join(dir, "out.ndjson"))
	checkOrder(t, outs, perKey)
	for i, o := range outs {
		if o.Ts != int64(1000+i) {
			t.Fatalf("output %d has timestamp %d: not in input order", i, o.Ts)
		}
	}
}

// S4: a slow guest and a fast source: reading pauses, the queues stay bounded, nothing is lost.
// 5,000 records (20,000 under hosttest.Long) are ten times the queue bound: the reader pauses
// within its first chunks.
func TestBackpressureBoundsQueues(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()
	recs, perKey := orderInput(200, hosttest.Scale(5_000, 20_000), 200_000, 3)
	tc := kvTask("slow", module, writeLines(t, dir, recs), filepath.Join(dir, "out.ndjson"))
	tc.Workers = 2
	tc.MaxQueued = 512
	h, err := host.New(host.Config{CacheDir: hosttest.CompileCache(t), DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := h.Stats()[0]
	// Once paused, a reader stops after the chunk it is reading (chunks are 256 records): the
	// queue exceeds its bound by at most the chunk that crossed it and that one.
	const chunk = 256
	if st.PeakQueued > tc.MaxQueued+2*chunk {
		t.Errorf("peak queued %d records, bound %d + two chunks", st.PeakQueued, tc.MaxQueued)
	}
	if st.Pauses == 0 {
		t.Error("the input was never paused")
	}
	checkOrder(t, readOutputs(t, filepath.Join(dir, "out.ndjson")), perKey)
	t.Logf("peak queued %d, pauses %d", st.PeakQueued, st.Pauses)
}

type deadLetter struct {
	Task     string `json:"task"`
	Input    string `json:"input"`
	Offset   int64  `json:"offset"`
	Line     int64  `json:"line"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error"`
	Key      string `json:"key"`
	Record   string `json:"record"`
}

func readDeadLetters(t *testing.T, path string) []deadLetter {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []deadLetter
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var d deadLetter
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("dead letter %q: %v", l, err)
		}
		out = append(out, d)
	}
	return out
}

// S17, S18: a trapping record is retried with back-off on a fresh instance, only its key
// waits, and after the last attempt it goes to the dead letters; everything else is processed.
func TestTrapRetriedThenDeadLettered(t *testing.T) {
	module := guestbuild.Go(t, "testguests/trapper")
	dir := t.TempDir()
	var recs [][2]string
	for i := 0; i < 400; i++ {
		v := "v" + strconv.Itoa(i)
		if i == 100 || i == 250 {
			v = "boom " + v
		}
		recs = append(recs, [2]string{"k" + strconv.Itoa(i%7), v})
	}
	tc := kvTask("trap", module, writeLines(t, dir, recs), filepath.Join(dir, "out.ndjson"))
	tc.Workers = 2
	tc.Retry = host.RetryConfig{MaxAttempts: 3, Backoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}
	tc.DeadLetter.Path = filepath.Join(dir, "dead.ndjson")
	h, err := host.New(host.Config{CacheDir: hosttest.CompileCache(t), DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	outs := readOutputs(t, filepath.Join(dir, "out.ndjson"))
	if len(outs) != 398 {
		t.Errorf("%d outputs, want 398 (every record but the two that trap)", len(outs))
	}
	// Per key, outputs stay in order around the dead-lettered record.
	last := map[string]int{}
	for _, o := range outs {
		n, _ := strconv.Atoi(strings.TrimPrefix(o.Value, "v"))
		if n <= last[o.Key] && last[o.Key] != 0 {
			t.Fatalf("key %s: %s after v%d", o.Key, o.Value, last[o.Key])
		}
		last[o.Key] = n
	}
	dead := readDeadLetters(t, tc.DeadLetter.Path)
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2: %+v", len(dead), dead)
	}
	// The two keys fail independently: their dead letters may come in either order.
	sort.Slice(dead, func(i, j int) bool { return dead[i].Offset < dead[j].Offset })
	for i, want := range []int64{100, 250} {
		d := dead[i]
		if d.Offset != want || d.Attempts != 3 || !strings.Contains(d.Error, "unreachable") || !strings.HasPrefix(d.Record, "boom") {
			t.Errorf("dead letter %d = %+v; want offset %d, 3 attempts, a trap error and the record", i, d, want)
		}
	}
	st := h.Stats()[0]
	if st.Retries != 4 || st.DeadLetters != 2 {
		t.Errorf("stats %+v: want 4 retries and 2 dead letters", st)
	}
}

// S17: with on_exhausted "halt" a record that keeps failing stops the task with an error that
// names it; its position is not committed past it.
func TestHaltOnExhausted(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()
	recs := [][2]string{{"a", "1 0"}, {"b", "1 0"}, {"a", "fail"}, {"b", "2 0"}}
	tc := kvTask("halt", module, writeLines(t, dir, recs), filepath.Join(dir, "out.ndjson"))
	tc.Retry = host.RetryConfig{MaxAttempts: 2, Backoff: time.Millisecond, MaxBackoff: time.Millisecond, OnExhausted: "halt"}
	h, err := host.New(host.Config{CacheDir: hosttest.CompileCache(t), DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	if err != nil {
		t.Fatal(err)
	}
	err = h.Run(context.Background())
	var te *host.TaskError
	if !errors.As(err, &te) || te.Task != "halt" || !strings.Contains(err.Error(), "line 3") ||
		!strings.Contains(err.Error(), "asked to fail") || !strings.Contains(err.Error(), "failed 2 times") {
		t.Fatalf("Run = %v; want a task error naming line 3, 2 attempts and the guest's message", err)
	}
	// A restart tries the same record again: it was not committed.
	h2, _ := host.New(host.Config{CacheDir: hosttest.CompileCache(t), DataDir: filepath.Join(dir, "data"), Tasks: []host.TaskConfig{tc}})
	if err := h2.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("restart: %v; want the same failure", err)
	}
}

// S12: a guest cannot touch the state of a key outside its batch; the host says so.
func TestStateOutsideBatchRefused(t *testing.T) {
	module := guestbuild.Go(t, "testguests/snoop")
	dir := t.TempDir()
	recs := [][2]string{{"a", "x"}, {"b", "y"}, {"a", "z"}}
	tc := kvTask("snoop", module, writeLines(t, dir, recs), filepath.Join(dir, "out.ndjson"))
	hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	outs := readOutputs(t, filepath.Join(dir, "out.ndjson"))
	if len(outs) != 12 {
		t.Fatalf("%d outputs, want 4 per record", len(outs))
	}
	for _, o := range outs {
		if o.Output != "errors" || o.Value != "ERR_KEY_NOT_IN_BATCH" {
			t.Errorf("got %+v; want every foreign-key access refused with ERR_KEY_NOT_IN_BATCH", o)
		}
	}
	if s := dumpState(t, filepath.Join(dir, "data"), "snoop"); s != "\n" {
		t.Errorf("state after refused writes: %q", s)
	}
}

// A malformed line goes to the dead letters with the reason and the run goes on; with
// on_malformed "halt" it stops the task with an error naming the line.
func TestMalformedLines(t *testing.T) {
	module := guestbuild.Go(t, "testguests/trapper")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	lines := `{"k":"a","v":"one"}
not json at all
{"k":"a","v":"two"}

{"k":["array"],"v":"bad key"}
{"k":"b","v":"three","ts":"yesterday"}
{"k":"b","v":"four"}`
	if err := os.WriteFile(input, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	tc := kvTask("bad", module, input, filepath.Join(dir, "out.ndjson"))
	tc.DeadLetter.Path = filepath.Join(dir, "dead.ndjson")
	hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	var vals []string
	for _, o := range readOutputs(t, filepath.Join(dir, "out.ndjson")) {
		vals = append(vals, o.Value)
	}
	if got := strings.Join(vals, ","); got != "one,two,four" {
		t.Errorf("outputs %s; want one,two,four", got)
	}
	dead := readDeadLetters(t, tc.DeadLetter.Path)
	wantLines := []int64{2, 5, 6}
	if len(dead) != len(wantLines) {
		t.Fatalf("dead letters %+v; want lines %v", dead, wantLines)
	}
	for i, d := range dead {
		if d.Line != wantLines[i] || !strings.Contains(d.Error, "malformed") || d.Record == "" {
			t.Errorf("dead letter %+v; want line %d with a reason and the raw line", d, wantLines[i])
		}
	}

	tc.Inputs[0].OnMalformed = "halt"
	tc.Name = "bad2"
	h, _ := host.New(host.Config{CacheDir: hosttest.CompileCache(t), DataDir: filepath.Join(dir, "data2"), Tasks: []host.TaskConfig{tc}})
	err := h.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "not a JSON object") {
		t.Fatalf("Run = %v; want a halt naming line 2", err)
	}
}

// Standard input cannot be rewound: a second run on the same data directory is refused, as it
// would count the same data twice, unless the input says continue; then it numbers its lines
// after the first run's, so state accumulates and no new line is mistaken for a replay.
func TestStdinInput(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()
	tc := host.TaskConfig{
		Name: "stdin", Module: module,
		Inputs: []host.InputConfig{{Name: "in", Type: "stdin", Format: "text", KeySeparator: "\t"}},
		Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")},
	}
	cfg := func(text string) host.Config {
		return host.Config{DataDir: filepath.Join(dir, "data"), Stdin: strings.NewReader(text), Tasks: []host.TaskConfig{tc}}
	}
	hosttest.RunToEnd(t, cfg("a\t1 0\nb\t1 0\n"))

	h, err := host.New(cfg("a\t9 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = h.Run(context.Background())
	var ce *host.ConfigError
	if !errors.As(err, &ce) || ce.Key != "tasks[0].inputs[0].continue" || !strings.Contains(ce.Problem, "already read stdin up to line 2") ||
		!strings.Contains(ce.Problem, "new data directory") {
		t.Fatalf("a second run on stdin: %v; want a ConfigError naming continue, the lines read and what to do", err)
	}

	tc.Inputs[0].Continue = true
	hosttest.RunToEnd(t, cfg("a\t2 0\nb\t2 0\na\t3 0\n"))
	checkOrder(t, readOutputs(t, filepath.Join(dir, "out.ndjson")), map[string]int{"a": 3, "b": 2})
}

// A corrupt or foreign module is refused before anything runs, with a message naming it.
func TestBadModuleRefused(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.wasm")
	os.WriteFile(bad, []byte("\x00asm\x01\x00\x00\x00garbage"), 0o644)
	input := writeLines(t, dir, [][2]string{{"a", "b"}})
	tc := kvTask("bad", bad, input, filepath.Join(dir, "out.ndjson"))
	_, err := host.Check(context.Background(), host.Config{DataDir: filepath.Join(dir, "data"), Tasks: []host.TaskConfig{tc}})
	var te *host.TaskError
	if !errors.As(err, &te) || te.Task != "bad" || !strings.Contains(err.Error(), "bad.wasm") {
		t.Fatalf("Check = %v; want a task error naming the module", err)
	}
	h, _ := host.New(host.Config{DataDir: filepath.Join(dir, "data"), Tasks: []host.TaskConfig{tc}})
	if err := h.Run(context.Background()); !errors.As(err, &te) {
		t.Fatalf("Run = %v; want the module refused", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "out.ndjson")); err == nil {
		b, _ := os.ReadFile(filepath.Join(dir, "out.ndjson"))
		if len(b) > 0 {
			t.Fatalf("a refused module produced output: %s", b)
		}
	}
}

// Config.Validate names every bad key at once. (A key separator on a JSON input, the default
// format, would be ignored: every line of a text file dead-lettered as "not a JSON object".)
func TestValidateNamesEveryKey(t *testing.T) {
	err := host.Config{Tasks: []host.TaskConfig{{
		Name:       "bad name",
		Inputs:     []host.InputConfig{{Type: "socket"}, {Format: "xml", Path: "x"}, {Path: "y", KeySeparator: " "}},
		Sequencing: host.SequencingConfig{Policy: "field"},
		Retry:      host.RetryConfig{OnExhausted: "explode"},
	}}}.Validate()
	for _, key := range []string{"tasks[0].name", "tasks[0].module", "tasks[0].inputs[0].type",
		"tasks[0].inputs[1].format", "tasks[0].inputs[2].key_separator", "tasks[0].sequencing.field", "tasks[0].retry.on_exhausted"} {
		if err == nil || !strings.Contains(err.Error(), key+":") {
			t.Errorf("Validate() = %v; want a problem for %s", err, key)
		}
	}
}

// A directory grant that holds the data directory or the compilation cache, or lies inside
// one of them, would let a module read every task's state or change the store, the module
// versions or the compiled code the host runs: refused. A grant beside them is fine.
func TestValidateGrantOverDataDir(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cache := filepath.Join(dir, "cache")
	for _, d := range []string{data, cache, filepath.Join(data, "sub"), filepath.Join(dir, "files")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(data, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host   string
		refuse bool
	}{
		{dir, true}, {data, true}, {filepath.Join(data, "sub"), true}, {cache, true},
		{filepath.Join(dir, "link"), true}, {filepath.Join(dir, "files"), false},
	} {
		err := host.Config{DataDir: data, CacheDir: cache, Tasks: []host.TaskConfig{{
			Name: "t", Module: "m.wasm", Inputs: []host.InputConfig{{Path: "in"}},
			Grants: host.GrantsConfig{Dirs: []host.DirGrantConfig{{Host: c.host, Guest: "/d"}}},
		}}}.Validate()
		got := err != nil && strings.Contains(err.Error(), "tasks[0].grants.dirs[0].host:")
		if got != c.refuse {
			t.Errorf("grant of %s: Validate() = %v, want refused %v", c.host, err, c.refuse)
		}
	}
}

// Retry and dead-letter log lines name a long key cut to 64 bytes with its length, as status
// does, instead of writing it whole (a 64 KB key made 65 KB log lines); the dead letter keeps
// the whole key.
func TestLongKeyCutInLogs(t *testing.T) {
	module := guestbuild.Go(t, "testguests/trapper")
	dir := t.TempDir()
	long := strings.Repeat("K", 20000)
	tc := kvTask("trap", module, writeLines(t, dir, [][2]string{{long, "boom"}, {"k", "v"}}), filepath.Join(dir, "out.ndjson"))
	tc.Retry = host.RetryConfig{MaxAttempts: 2, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}
	tc.DeadLetter.Path = filepath.Join(dir, "dead.ndjson")
	var logs bytes.Buffer
	h, err := host.New(host.Config{CacheDir: hosttest.CompileCache(t), DataDir: filepath.Join(dir, "data"), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Tasks: []host.TaskConfig{tc}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := logs.String()
	if strings.Contains(l, strings.Repeat("K", 65)) {
		for _, line := range strings.Split(l, "\n") {
			if strings.Contains(line, strings.Repeat("K", 65)) {
				t.Errorf("a log line holds more than 64 bytes of the key: %.300s", line)
				break
			}
		}
	}
	if !strings.Contains(l, "(20000 bytes)") || !strings.Contains(l, "retrying") || !strings.Contains(l, "dead letters") {
		t.Errorf("the retry and dead-letter lines do not name the cut key:\n%.3000s", l)
	}
	dead := readDeadLetters(t, tc.DeadLetter.Path)
	if len(dead) != 1 || dead[0].Key != long {
		t.Errorf("dead letters %d; the key must stay whole in the dead letter", len(dead))
	}
}
