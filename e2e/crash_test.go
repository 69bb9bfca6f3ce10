package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// wordcountExpect is the independent model of the wordcount task: per user, per word, the count.
type wordcountExpect map[string]map[string]int

func (e wordcountExpect) add(user, text string) {
	for _, w := range wordsOf(text) {
		if e[user] == nil {
			e[user] = map[string]int{}
		}
		e[user][w]++
	}
}

// writeWordcountInput writes n JSON lines over users users and returns the expected state.
func writeWordcountInput(t *testing.T, path string, n, users int, seed uint64) wordcountExpect {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	vocab := make([]string, 64)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("w%02d", i)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	exp := wordcountExpect{}
	for i := 0; i < n; i++ {
		user := fmt.Sprintf("user%04d", rng.IntN(users))
		k := 1 + rng.IntN(4)
		parts := make([]string, k)
		for j := range parts {
			parts[j] = vocab[rng.IntN(len(vocab))]
			if rng.IntN(5) == 0 {
				parts[j] = strings.ToUpper(parts[j])
			}
		}
		text := strings.Join(parts, ", ")
		exp.add(user, text)
		line, _ := json.Marshal(map[string]any{"user": user, "ts": 1700000000000 + int64(i), "text": text})
		w.Write(line)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return exp
}

func writeConfig(t testing.TB, dir, module, input, output string, extra string) string {
	t.Helper()
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
%s`, filepath.Join(dir, "data"), module, input, output, extra)
	path := filepath.Join(dir, "wasmstream.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// readState reads the task's whole state through the host's read-only state API.
func readState(t *testing.T, dataDir, task string) wordcountExpect {
	t.Helper()
	r, err := host.OpenState(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := wordcountExpect{}
	err = r.Scan(task, nil, false, func(e host.StateEntry) bool {
		n, err := strconv.Atoi(string(e.Value))
		if err != nil {
			t.Errorf("state %s/%s = %q is not a count", e.Key, e.Name, e.Value)
			return false
		}
		if got[string(e.Key)] == nil {
			got[string(e.Key)] = map[string]int{}
		}
		got[string(e.Key)][string(e.Name)] = n
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// diffState lists the (user, word) counts that differ, sorted.
func diffState(want, got wordcountExpect) []string {
	var diffs []string
	for u, words := range want {
		for w, n := range words {
			if got[u][w] != n {
				diffs = append(diffs, fmt.Sprintf("%s/%s: want %d, got %d", u, w, n, got[u][w]))
			}
		}
	}
	for u, words := range got {
		for w, n := range words {
			if _, ok := want[u][w]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s/%s: unexpected count %d", u, w, n))
			}
		}
	}
	slices.Sort(diffs)
	return diffs
}

// checkOutputs checks the at-least-once outputs: every line parses, and for each (user, word)
// the counts emitted are exactly 1..final (each at least once). It returns the duplicates.
func checkOutputs(t *testing.T, path string, want wordcountExpect) (lines, dups int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]map[int]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines++
		var o struct {
			Output, Key, Value string
			Ts                 int64
		}
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("output line %d does not parse: %v: %q", lines, err, sc.Text())
		}
		word, count, ok := strings.Cut(o.Value, " ")
		n, err := strconv.Atoi(count)
		if !ok || err != nil || o.Output != "counts" {
			t.Fatalf("output line %d: unexpected %q", lines, sc.Text())
		}
		k := o.Key + "/" + word
		if seen[k] == nil {
			seen[k] = map[int]int{}
		}
		seen[k][n]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	missing := 0
	for u, words := range want {
		for w, final := range words {
			got := seen[u+"/"+w]
			for c := 1; c <= final; c++ {
				switch got[c] {
				case 0:
					missing++
					if missing < 10 {
						t.Errorf("output %s/%s count %d is missing", u, w, c)
					}
				default:
					dups += got[c] - 1
				}
			}
			if len(got) != final {
				t.Errorf("output %s/%s: counts %v beyond the final %d", u, w, got, final)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d outputs missing", missing)
	}
	return lines, dups
}

// TestCrashExactState runs the real binary over 200k records (100k unless hosttest.Long), kills it with SIGKILL at random
// moments at least 20 times (10 unless hosttest.Long), restarts it each time, and checks that the final state equals the
// independently computed expectation exactly (S10) and that no output was lost (S11).
func TestCrashExactState(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	input := filepath.Join(dir, "input.ndjson")
	output := filepath.Join(dir, "out.ndjson")
	records := hosttest.Scale(100_000, 200_000)
	want := writeWordcountInput(t, input, records, 2000, 42)
	cfg := writeConfig(t, dir, module, input, output, "")

	rng := rand.New(rand.NewPCG(7, 11))
	kills, runs := killLoop(t, bin, cfg, killPlan{
		timeout: 8 * time.Minute,
		live:    randomKills(rng, output, 1500*time.Millisecond, 300*time.Millisecond),
		more:    func() { records += writeMore(t, input, want, rng, 20_000) },
	})
	got := readState(t, filepath.Join(dir, "data"), "wc")
	if diffs := diffState(want, got); len(diffs) > 0 {
		if len(diffs) > 20 {
			diffs = diffs[:20]
		}
		t.Fatalf("state differs from the expectation after %d kills: %s\n%s", kills, diffSummary(want, got), strings.Join(diffs, "\n"))
	}
	lines, dups := checkOutputs(t, output, want)
	t.Logf("%d records, %d runs, %d SIGKILLs: state exact over %d users; %d output lines, %d duplicates (at least once), %d per kill",
		records, runs, kills, len(got), lines, dups, dups/kills)
	fmt.Printf("crash test: %d SIGKILLs, %d runs, %d records, state exact, %d duplicate outputs (%d per kill)\n", kills, runs, records, dups, dups/kills)
}

// killPlan is how killLoop runs and kills the binary.
type killPlan struct {
	timeout time.Duration
	// kills is how many runs are killed; 0: 20, or 10 unless hosttest.Long.
	kills int
	// live is called once run n has started and returns how long the run lives before its
	// kill. It may first wait for the run to reach some state; if the run exits meanwhile, it
	// must put the exit back into done.
	live func(n int, done chan error) time.Duration
	// ended, if set, is called once run n has ended, killed or finished by itself.
	ended func(n int, killed bool)
	// more makes more input, when a run finished before its kill.
	more func()
}

// randomKills is the usual killPlan.live: odd runs die at any moment below anyDelay from
// start-up on (compiling, opening the store, replaying); even runs first wait until output
// grew and die below outDelay after, so that the kill lands mid-processing, between
// checkpoints.
func randomKills(rng *rand.Rand, output string, anyDelay, outDelay time.Duration) func(int, chan error) time.Duration {
	return func(n int, done chan error) time.Duration {
		if n%2 == 0 {
			waitGrowth(output, done)
			return time.Duration(rng.Int64N(int64(outDelay)))
		}
		return time.Duration(rng.Int64N(int64(anyDelay)))
	}
}

// killLoop runs the binary with cfg again and again, killing each run with SIGKILL when
// p.live says, until it has killed 20 runs (10 unless hosttest.Long: half of them at start-up,
// half mid-processing, as with 20); then it lets the last run finish. A run that
// finishes before its kill calls p.more and the kills go on. It fails the test on a run's
// error or after p.timeout.
func killLoop(t *testing.T, bin, cfg string, p killPlan) (kills, runs int) {
	t.Helper()
	minKills := p.kills
	if minKills == 0 {
		minKills = hosttest.Scale(10, 20)
	}
	deadline := time.Now().Add(p.timeout)
	ended := func(n int, killed bool) {
		if p.ended != nil {
			p.ended(n, killed)
		}
	}
	for {
		if time.Now().After(deadline) {
			t.Fatalf("not finished after %d runs and %d kills", runs, kills)
		}
		runs++
		cmd := exec.Command(bin, "run", "-c", cfg, "--log-level", "warn")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if kills >= minKills {
			if err := <-done; err != nil {
				t.Fatalf("final run failed: %v\n%s", err, stderr.String())
			}
			return kills, runs
		}
		delay := p.live(runs, done)
		select {
		case err := <-done:
			ended(runs, false)
			if err != nil {
				t.Fatalf("run %d failed: %v\n%s", runs, err, stderr.String())
			}
			t.Logf("run %d finished before its kill; appending input", runs)
			p.more()
			continue
		case <-time.After(delay):
		}
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		kills++
		ended(runs, true)
	}
}

// writeMore appends n records to the input and to the expectation.
func writeMore(t *testing.T, input string, want wordcountExpect, rng *rand.Rand, n int) int {
	t.Helper()
	f, err := os.OpenFile(input, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	for i := 0; i < n; i++ {
		user := fmt.Sprintf("user%04d", rng.IntN(2000))
		text := fmt.Sprintf("w%02d w%02d", rng.IntN(64), rng.IntN(64))
		want.add(user, text)
		line, _ := json.Marshal(map[string]any{"user": user, "ts": 1800000000000 + int64(i), "text": text})
		w.Write(line)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitGrowth returns once the file at path has grown, or the process has exited (done is then
// refilled for the caller).
func waitGrowth(path string, done chan error) {
	size := func() int64 {
		st, err := os.Stat(path)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	start := size()
	for i := 0; i < 1000; i++ {
		select {
		case err := <-done:
			done <- err
			return
		case <-time.After(10 * time.Millisecond):
		}
		if size() > start {
			return
		}
	}
}
