package host_test

import (
	"bytes"
	"context"
	"fmt"
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

// chainTasks are three tasks in a chain: wordcount over the input (per key, per word) → rekey
// (moves each "<word> <count>" to the word's key) → counter (per word: how many times it was
// counted). Only the last writes to a file.
func chainTasks(wc, rk, ctr, input, out string) []host.TaskConfig {
	first := kvTask("wc", wc, input, "")
	first.Output = host.OutputConfig{Type: "stdout"}
	return []host.TaskConfig{
		first,
		{Name: "rk", Module: rk, Inputs: []host.InputConfig{{Name: "counts", Type: "task", Task: "wc", Output: "counts"}}},
		{Name: "tot", Module: ctr, Inputs: []host.InputConfig{{Name: "words", Type: "task", Task: "rk", Output: "rekeyed", MaxBacklog: 50}},
			Output: host.OutputConfig{Type: "file", Path: out}},
	}
}

// chainState reads one state name of every key of task.
func chainState(t *testing.T, dataDir, task, name string) map[string]string {
	t.Helper()
	r, err := host.OpenState(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := map[string]string{}
	if err := r.Scan(task, nil, false, func(e host.StateEntry) bool {
		if name == "" || string(e.Name) == name {
			got[string(e.Key)+"/"+string(e.Name)] = string(e.Value)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestChainExactState runs a chain of three tasks to the end of its input, twice (the second
// run over more input), and checks every stage's state exactly: each upstream output reached
// the next task once. The log's back-pressure bound (50) is far below the records: rk
// checkpoints early each time 50 entries wait and then holds until tot covers them, again and
// again; the log is trimmed behind the readers.
func TestChainExactState(t *testing.T) {
	wc, rk, ctr := guestbuild.Go(t, "wordcount"), guestbuild.Go(t, "testguests/rekey"), guestbuild.Go(t, "testguests/counter")
	dir := t.TempDir()
	var recs [][2]string
	perUser, perWord := map[string]int{}, map[string]int{}
	words := map[string]map[string]int{}
	add := func(n int) {
		for i := range n {
			u, w1, w2 := fmt.Sprint("u", i%7), fmt.Sprint("w", i%13), fmt.Sprint("x", i%5)
			recs = append(recs, [2]string{u, w1 + " " + w2})
			for _, w := range []string{w1, w2} {
				perUser[u]++
				perWord[w]++
				if words[u] == nil {
					words[u] = map[string]int{}
				}
				words[u][w]++
			}
		}
	}
	add(1000)
	input := writeLines(t, dir, recs)
	out := filepath.Join(dir, "out.ndjson")
	cfg := host.Config{DataDir: filepath.Join(dir, "data"), CheckpointInterval: 10 * time.Millisecond, Tasks: chainTasks(wc, rk, ctr, input, out)}
	run := func() []host.TaskStats {
		h := hosttest.New(t, cfg)
		if err := h.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		return h.Stats()
	}
	check := func() {
		t.Helper()
		data := cfg.DataDir
		got := chainState(t, data, "wc", "")
		for u, ws := range words {
			for w, n := range ws {
				if got[u+"/"+w] != strconv.Itoa(n) {
					t.Errorf("wc %s/%s = %q, want %d", u, w, got[u+"/"+w], n)
				}
			}
		}
		got = chainState(t, data, "rk", "n")
		for u, n := range perUser {
			if got[u+"/n"] != strconv.Itoa(n) {
				t.Errorf("rk %s = %q, want %d", u, got[u+"/n"], n)
			}
		}
		got = chainState(t, data, "tot", "n")
		if len(got) != len(perWord) {
			t.Errorf("tot has %d keys, want %d: %v", len(got), len(perWord), got)
		}
		for w, n := range perWord {
			if got[w+"/n"] != strconv.Itoa(n) {
				t.Errorf("tot %s = %q, want %d", w, got[w+"/n"], n)
			}
		}
	}
	st := run()
	check()
	byName := map[string]host.TaskStats{}
	for _, s := range st {
		byName[s.Task] = s
	}
	// Whether rk had to hold for tot (max_backlog 50) depends on the two tasks' relative speed:
	// CI on a loaded machine once saw tot keep up and rk hold 0 times. Holding itself is
	// checked where it does not depend on speed (internal/task's TestChainTxnBound: a reader
	// MaxBacklog entries behind holds the writer); here the count is reported.
	if byName["wc"].ChainEntries != 2000 || byName["rk"].ChainEntries != 2000 {
		t.Errorf("chain entries wc %d, rk %d (want 2000 each)", byName["wc"].ChainEntries, byName["rk"].ChainEntries)
	}
	t.Logf("rk held %d times for tot (max_backlog 50)", byName["rk"].ChainHolds)
	in := byName["tot"].Inputs[0]
	if in.Chain != "rk/rekeyed" || in.Lag != 0 || in.Committed != 2000 {
		t.Errorf("tot's input: chain %q, lag %d, committed %d; want rk/rekeyed, 0, 2000", in.Chain, in.Lag, in.Committed)
	}
	// A second run over more input continues each log where it ended.
	add(500)
	writeLines(t, dir, recs)
	run()
	check()
	outs := readOutputs(t, out)
	if len(outs) != 3000 {
		t.Errorf("tot emitted %d records, want 3000", len(outs))
	}
	var keys []string
	for _, o := range outs {
		keys = append(keys, o.Key)
	}
	sort.Strings(keys)
	if !strings.HasPrefix(strings.Join(keys, ","), "w0,") {
		t.Errorf("tot's outputs are not keyed by word: %v", keys[:5])
	}
}

// TestValidateChains: an input of type task must name another task and an output it may emit
// to; two inputs of a task may not read the same output; cycles and Kafka-state upstreams are
// refused, each with the key that causes it.
func TestValidateChains(t *testing.T) {
	task := func(name string, ins ...host.InputConfig) host.TaskConfig {
		return host.TaskConfig{Name: name, Module: "m.wasm", Inputs: ins}
	}
	in := func(task, output string) host.InputConfig {
		return host.InputConfig{Name: task + "-" + output, Type: "task", Task: task, Output: output}
	}
	file := host.InputConfig{Path: "in"}
	for _, c := range []struct {
		name  string
		tasks []host.TaskConfig
		want  []string // key: problem fragments; none: valid
	}{
		{"valid", []host.TaskConfig{task("a", file), task("b", in("a", "counts")), task("c", in("b", "x"), in("a", "counts"))}, nil},
		{"unknown task", []host.TaskConfig{task("a", file), task("b", in("nope", "counts"))}, []string{`tasks[1].inputs[0].task: no task is named "nope"`}},
		{"itself", []host.TaskConfig{task("a", file, in("a", "counts"))}, []string{`tasks[0].inputs[1].task: task "a" cannot read its own output`}},
		{"no output", []host.TaskConfig{task("a", file), task("b", in("a", ""))}, []string{"tasks[1].inputs[0].output: is required"}},
		{"twice", []host.TaskConfig{task("a", file), task("b", in("a", "c"), host.InputConfig{Name: "again", Type: "task", Task: "a", Output: "c"})},
			[]string{`tasks[1].inputs[1].output: another input of this task reads output "c" of task "a"`}},
		{"cycle", []host.TaskConfig{task("a", file, in("c", "o")), task("b", in("a", "o")), task("c", in("b", "o"))},
			[]string{"tasks[1].inputs[0].task: the chain forms a cycle: a ← c ← b ← a"}},
		{"names", []host.TaskConfig{{Name: "a", Module: "m", Inputs: []host.InputConfig{file}, Output: host.OutputConfig{Names: []string{"x"}}}, task("b", in("a", "y"))},
			[]string{`tasks[1].inputs[0].output: task "a" cannot emit to "y"`}},
		{"not for file", []host.TaskConfig{task("a", host.InputConfig{Path: "in", Task: "b", MaxBacklog: 3})},
			[]string{"tasks[0].inputs[0].task: applies to inputs of type task only", "tasks[0].inputs[0].max_backlog: applies to inputs of type task only"}},
		{"path", []host.TaskConfig{task("a", file), task("b", host.InputConfig{Type: "task", Task: "a", Output: "o", Path: "x", MaxBacklog: -1})},
			[]string{"tasks[1].inputs[0].path: does not apply to an input of type task", "tasks[1].inputs[0].max_backlog: must be positive"}},
		{"changelog upstream", []host.TaskConfig{{Name: "a", Module: "m", Inputs: []host.InputConfig{{Type: "kafka", Topics: []string{"t"}}},
			Changelog: host.ChangelogConfig{Enabled: true}}, task("b", in("a", "o"))},
			[]string{`tasks[1].inputs[0].task: task "a" keeps its state in Kafka`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := host.Config{Kafka: host.KafkaConfig{Brokers: []string{"localhost:9092"}}, Tasks: c.tasks}.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v\nwant a problem %q", err, w)
				}
			}
		})
	}
}

// chainInput makes n records over 7 users, two words each.
func chainInput(n int) [][2]string {
	var recs [][2]string
	for i := range n {
		recs = append(recs, [2]string{fmt.Sprint("u", i%7), fmt.Sprint("w", i%13, " x", i%5)})
	}
	return recs
}

// sortedOutputs reads path's outputs as sorted "key value" lines.
func sortedOutputs(t *testing.T, path string) []string {
	t.Helper()
	var lines []string
	for _, o := range readOutputs(t, path) {
		lines = append(lines, o.Output+" "+o.Key+" "+o.Value)
	}
	sort.Strings(lines)
	return lines
}

// TestChainSameAsKafka: the three chained tasks give the same outputs as the same three tasks
// connected through Kafka topics (an in-process broker).
func TestChainSameAsKafka(t *testing.T) {
	wc, rk, ctr := guestbuild.Go(t, "wordcount"), guestbuild.Go(t, "testguests/rekey"), guestbuild.Go(t, "testguests/counter")
	dir := t.TempDir()
	const records = 2000
	input := writeLines(t, dir, chainInput(records))

	chained := filepath.Join(dir, "chained.ndjson")
	hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "chain-data"), CheckpointInterval: 50 * time.Millisecond,
		Tasks: chainTasks(wc, rk, ctr, input, chained)})

	c := newCluster(t, "counts", "rekeyed")
	viaKafka := filepath.Join(dir, "kafka.ndjson")
	tasks := chainTasks(wc, rk, ctr, input, viaKafka)
	tasks[0].Output = host.OutputConfig{Type: "kafka", Topic: "counts"}
	tasks[1].Inputs = []host.InputConfig{{Name: "counts", Type: "kafka", Topics: []string{"counts"}}}
	tasks[1].Output = host.OutputConfig{Type: "kafka", Topic: "rekeyed"}
	tasks[2].Inputs = []host.InputConfig{{Name: "words", Type: "kafka", Topics: []string{"rekeyed"}}}
	r := hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, "kafka-data"), CheckpointInterval: 50 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: tasks})
	// Complete lines only: the file sink may be mid-line (or not have made the file yet) when
	// polled, and readOutputs fails on a partial line.
	hosttest.WaitFor(t, 2*time.Minute, "the last task's outputs through Kafka", func() bool {
		b, _ := os.ReadFile(viaKafka)
		return bytes.Count(b, []byte("\n")) >= 2*records
	})
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	want, got := sortedOutputs(t, viaKafka), sortedOutputs(t, chained)
	if len(got) != 2*records || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("chained outputs (%d) differ from those through Kafka (%d)", len(got), len(want))
	}
}

// countLines counts the lines of the file at path (0 when it does not exist yet).
func countLines(tb testing.TB, path string) int {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

// checkChainState checks the three stages' state against recs (key, "<w1> <w2>") exactly.
func checkChainState(t *testing.T, data string, recs [][2]string) {
	t.Helper()
	words, perUser, perWord := map[string]int{}, map[string]int{}, map[string]int{}
	for _, r := range recs {
		for _, w := range strings.Fields(r[1]) {
			words[r[0]+"/"+w]++
			perUser[r[0]+"/n"]++
			perWord[w+"/n"]++
		}
	}
	for _, c := range []struct {
		task, name string
		want       map[string]int
	}{{"wc", "", words}, {"rk", "n", perUser}, {"tot", "n", perWord}} {
		got := chainState(t, data, c.task, c.name)
		if len(got) != len(c.want) {
			t.Errorf("%s: %d keys and names, want %d", c.task, len(got), len(c.want))
		}
		for k, n := range c.want {
			if got[k] != strconv.Itoa(n) {
				t.Errorf("%s %s = %q, want %d", c.task, k, got[k], n)
			}
		}
	}
}

// withCustomSection returns wasm with a custom section appended: another module version (other
// bytes) that behaves the same.
func withCustomSection(t *testing.T, path, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A custom section: id 0, its size, then its name (length-prefixed) and one byte of content.
	return append(append(append(b, 0, byte(2+len(name)), byte(len(name))), name...), 1)
}

// TestChainDeployKeepsExactState deploys new versions of the two downstream tasks of a running
// chain and rolls one back, then lets the chain run to its end: every stage's state is exact.
func TestChainDeployKeepsExactState(t *testing.T) {
	wc, rk, ctr := guestbuild.Go(t, "wordcount"), guestbuild.Go(t, "testguests/rekey"), guestbuild.Go(t, "testguests/counter")
	dir := t.TempDir()
	recs := chainInput(1000)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	tasks := chainTasks(wc, rk, ctr, "", filepath.Join(dir, "out.ndjson"))
	tasks[0].Inputs = []host.InputConfig{{Name: "in", Type: "stdin", KeyField: "k", ValueField: "v", TimestampField: "ts"}}
	data := filepath.Join(dir, "data")
	r := hosttest.Start(t, host.Config{DataDir: data, CheckpointInterval: 10 * time.Millisecond, Stdin: pr, Tasks: tasks})
	feed := func(recs [][2]string) {
		var b bytes.Buffer
		for i, rec := range recs {
			fmt.Fprintf(&b, "{\"k\":%q,\"v\":%q,\"ts\":%d}\n", rec[0], rec[1], 1000+i)
		}
		if _, err := pw.Write(b.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	committed := func(task string) int64 {
		for _, s := range r.Stats() {
			if s.Task == task && len(s.Inputs) > 0 {
				return s.Inputs[0].Committed
			}
		}
		return 0
	}
	feed(recs[:500])
	hosttest.WaitFor(t, time.Minute, "tot to commit some of its input", func() bool { return committed("tot") > 0 })
	ctx := context.Background()
	for _, d := range []struct{ task, module string }{{"rk", rk}, {"tot", ctr}} {
		dep, err := r.Deploy(ctx, d.task, withCustomSection(t, d.module, "v2"))
		if err != nil || dep.Unchanged {
			t.Fatalf("deploy %s: %+v, %v; want a new version", d.task, dep, err)
		}
	}
	feed(recs[500:750])
	if _, err := r.Rollback(ctx, "rk", 0); err != nil {
		t.Fatalf("rollback rk: %v", err)
	}
	feed(recs[750:])
	pw.Close()
	if err := r.Wait(); err != nil {
		t.Fatal(err)
	}
	checkChainState(t, data, recs)
}

// TestChainWithKafkaTopicsMap: an upstream whose kafka output maps only other names to topics
// (which restricts what it may emit) may still emit to its chained output.
func TestChainWithKafkaTopicsMap(t *testing.T) {
	wc, ctr := guestbuild.Go(t, "wordcount"), guestbuild.Go(t, "testguests/counter")
	dir := t.TempDir()
	recs := chainInput(20)
	input := writeLines(t, dir, recs)
	c := newCluster(t, "other")
	first := kvTask("wc", wc, input, "")
	first.Output = host.OutputConfig{Type: "kafka", Topics: map[string]string{"other": "other"}}
	hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "data"), Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{first, {Name: "tot", Module: ctr, Inputs: []host.InputConfig{{Name: "counts", Type: "task", Task: "wc", Output: "counts"}},
			Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")}}}})
	got := chainState(t, filepath.Join(dir, "data"), "tot", "n")
	for u, n := range map[string]string{"u0": "6", "u6": "4"} { // users u0..u6: 2 words per record
		if got[u+"/n"] != n {
			t.Errorf("tot %s = %q, want %s (all: %v)", u, got[u+"/n"], n, got)
		}
	}
}
