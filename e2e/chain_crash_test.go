package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// writeChainConfig configures three chained tasks: wordcount over the input (per user, per
// word) → rekey (each "<word> <count>" moved to the word's key, counted per user) → counter
// (per word, how many times it was counted), whose outputs go to output.
func writeChainConfig(t *testing.T, dir, wc, rk, ctr, input, output string) string {
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
  - name: rk
    module: %s
    workers: 2
    inputs:
      - name: counts
        type: task
        task: wc
        output: counts
        max_backlog: 5000
  - name: tot
    module: %s
    workers: 2
    inputs:
      - name: words
        type: task
        task: rk
        output: rekeyed
    output:
      type: file
      path: %s
`, filepath.Join(dir, "data"), wc, input, rk, ctr, output)
	path := filepath.Join(dir, "wasmstream.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// readCounts reads state name of every key of task as integers.
func readCounts(t *testing.T, dataDir, task, name string) map[string]int {
	t.Helper()
	r, err := host.OpenState(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := map[string]int{}
	err = r.Scan(task, nil, false, func(e host.StateEntry) bool {
		if string(e.Name) != name {
			return true
		}
		n, err := strconv.Atoi(string(e.Value))
		if err != nil {
			t.Errorf("%s state %s/%s = %q is not a count", task, e.Key, e.Name, e.Value)
		}
		got[string(e.Key)] = n
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func diffCounts(what string, want, got map[string]int) []string {
	var diffs []string
	for k, n := range want {
		if got[k] != n {
			diffs = append(diffs, fmt.Sprintf("%s %s: want %d, got %d", what, k, n, got[k]))
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s %s: unexpected %d", what, k, n))
		}
	}
	return diffs
}

// TestChainCrashExactState runs three chained tasks in the real binary, kills it with SIGKILL at
// random moments at least 20 times, restarts it each time, and checks that every stage's final
// state equals the independent expectation: each upstream output reached the next task exactly
// once, nothing lost, across every kill.
func TestChainCrashExactState(t *testing.T) {
	bin := guestbuild.Binary(t)
	wc, rk, ctr := guestbuild.Go(t, "wordcount"), guestbuild.Go(t, "testguests/rekey"), guestbuild.Go(t, "testguests/counter")
	dir := t.TempDir()
	input := filepath.Join(dir, "input.ndjson")
	output := filepath.Join(dir, "out.ndjson")
	records := 30_000
	want := writeWordcountInput(t, input, records, 300, 43)
	cfg := writeChainConfig(t, dir, wc, rk, ctr, input, output)

	rng := rand.New(rand.NewPCG(9, 13))
	kills, runs := killLoop(t, bin, cfg, killPlan{
		timeout: 6 * time.Minute,
		kills:   20, // the issue asks for 20 or more, whatever the scale
		live:    randomKills(rng, output, 1500*time.Millisecond, 300*time.Millisecond),
		more:    func() { records += writeMore(t, input, want, rng, 5_000) },
	})
	data := filepath.Join(dir, "data")
	diffs := diffState(want, readState(t, data, "wc"))
	perUser, perWord := map[string]int{}, map[string]int{}
	for u, words := range want {
		for w, n := range words {
			perUser[u] += n
			perWord[w] += n
		}
	}
	diffs = append(diffs, diffCounts("rk", perUser, readCounts(t, data, "rk", "n"))...)
	diffs = append(diffs, diffCounts("tot", perWord, readCounts(t, data, "tot", "n"))...)
	if len(diffs) > 0 {
		if len(diffs) > 20 {
			diffs = diffs[:20]
		}
		t.Fatalf("state differs from the expectation after %d kills:\n%s", kills, strings.Join(diffs, "\n"))
	}
	t.Logf("%d records, %d runs, %d SIGKILLs: state exact in all three stages (%d users, %d words)", records, runs, kills, len(perUser), len(perWord))
}
