package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// deployLog is what the deploys and rollbacks of one run were answered, shared between the
// goroutine that sends them and the test.
type deployLog struct {
	mu         sync.Mutex
	acked      map[int64]string // version → sha256 of every deploy answered 201
	active     int64            // the version the last answered request made active (0: none yet)
	inFlight   bool             // a request was sent and not answered
	answered   int
	notRunning int  // deploys refused because the run had finished its input
	registered bool // a check found the task's versions: from then on they must stay listed
	problems   []string
}

// drive sends deploys of new variants of wasm, and now and then a rollback, to the admin API
// at base until a request fails to connect (the process died). next numbers the variants.
func (l *deployLog) drive(base string, wasm []byte, rng *rand.Rand, next *int) {
	client := &http.Client{Timeout: 30 * time.Second}
	for {
		l.mu.Lock()
		rollback := len(l.acked) >= 2 && rng.IntN(4) == 0
		l.inFlight = true
		l.mu.Unlock()
		var req *http.Request
		var sum string
		if rollback {
			req, _ = http.NewRequest("POST", base+"/v1/tasks/wc/rollback", nil)
		} else {
			*next++
			variant := guestbuild.WithCustomSection(wasm, fmt.Sprintf("deploy-crash-test-%d", *next))
			s := sha256.Sum256(variant)
			sum = hex.EncodeToString(s[:])
			req, _ = http.NewRequest("POST", base+"/v1/tasks/wc/versions", bytes.NewReader(variant))
		}
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := client.Do(req)
		if err != nil {
			return // the process died: inFlight stays set
		}
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		var d struct {
			Version struct {
				Version int64  `json:"version"`
				SHA256  string `json:"sha256"`
			} `json:"version"`
		}
		l.mu.Lock()
		switch {
		case rerr != nil:
			l.mu.Unlock()
			return // the answer was cut off by the kill: still in flight
		case resp.StatusCode == http.StatusConflict && bytes.Contains(body, []byte("task not running")):
			// The run finished its input: the version is stored, not active.
			l.notRunning++
		case rollback && resp.StatusCode == http.StatusConflict && bytes.Contains(body, []byte("no earlier module version")):
			// Rollbacks walked back to the oldest version kept: nothing changed.
		case resp.StatusCode >= 300 || json.Unmarshal(body, &d) != nil:
			l.problems = append(l.problems, fmt.Sprintf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, body))
		case !rollback && d.Version.SHA256 != sum:
			l.problems = append(l.problems, fmt.Sprintf("deploy answered version %d with sha256 %s, sent %s", d.Version.Version, d.Version.SHA256, sum))
		default:
			if !rollback {
				l.acked[d.Version.Version] = sum
			}
			l.active = d.Version.Version
			l.answered++
		}
		l.inFlight = false
		l.mu.Unlock()
	}
}

// check compares the registry of the killed host's data directory with what the requests were
// answered: every answered deploy is listed with its bytes' hash (unless keep newer versions
// pruned it), no version is marked bad, and the active version is the one the last answered
// request made active, or, with a request in flight at the kill, any listed one.
func (l *deployLog) check(t *testing.T, dataDir string, keep int) {
	t.Helper()
	vs, err := host.OfflineVersions(dataDir, "wc")
	if errors.Is(err, host.ErrUnknownTask) && !l.registered && len(l.acked) == 0 {
		return // killed at start-up before any run recorded its first version: nothing to lose yet
	}
	if err != nil {
		t.Fatalf("versions after the kill: %v", err)
	}
	l.registered = true
	listed := map[int64]host.ModuleVersion{}
	var active int64
	for _, v := range vs {
		listed[v.Version] = v
		if v.Active {
			active = v.Version
		}
		if v.Status == "bad" {
			t.Errorf("version %d is marked bad after a kill: %s", v.Version, v.Reason)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for v, sum := range l.acked {
		got, ok := listed[v]
		newer := 0
		for w := range listed {
			if w > v {
				newer++
			}
		}
		switch {
		case !ok && newer < keep:
			t.Errorf("deployed version %d (answered 201) is gone after a kill; %d newer versions listed", v, newer)
		case ok && got.SHA256 != sum:
			t.Errorf("version %d has sha256 %s after a kill, deployed %s", v, got.SHA256, sum)
		}
	}
	switch {
	case l.active != 0 && !l.inFlight && active != l.active:
		t.Errorf("version %d is active after a kill; the last answered request made %d active, and none was in flight", active, l.active)
	case listed[active].Version == 0:
		t.Errorf("no listed version is active after a kill (active %d)", active)
	}
	l.active = active
	l.inFlight = false
}

// TestCrashDuringDeploys kills the real binary with SIGKILL at random moments, at least 10
// times (20 under hosttest.Long), while deploys of new module versions
// and rollbacks arrive over the admin API. Every run must start on the version the registry
// holds; after every kill, every deploy that was answered must still be listed with its hash
// and the active version must be the one last made active (S19); and in the end the state must
// equal the expectation exactly and no output be lost (S10, S11), whichever versions processed
// the records.
func TestCrashDuringDeploys(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	wasm, err := os.ReadFile(module)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	input := filepath.Join(dir, "input.ndjson")
	output := filepath.Join(dir, "out.ndjson")
	records := hosttest.Scale(150_000, 300_000)
	want := writeWordcountInput(t, input, records, 2000, 43)
	port := freePort(t)
	const keep = 6
	cfg := writeConfig(t, dir, module, input, output, fmt.Sprintf("admin:\n  addr: 127.0.0.1:%d\n  token: tok\nkeep_module_versions: %d\n", port, keep))
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	dataDir := filepath.Join(dir, "data")

	rng := rand.New(rand.NewPCG(17, 19))
	log := &deployLog{acked: map[int64]string{}}
	variants := 0
	var driving chan struct{} // closed once the run's deploys stopped
	kills, runs := killLoop(t, bin, cfg, killPlan{
		timeout: 8 * time.Minute,
		// Odd runs die at any moment from start-up on; even runs within 3 s of their first
		// answered deploy, with the next one under way. Waiting for that answer (a deploy
		// compiles the module: seconds on a loaded machine) makes every even run's kill land
		// among deploys at any machine speed; a kill timed from the deploys' start found none
		// answered on a slow one.
		live: func(n int, done chan error) time.Duration {
			driving = make(chan struct{})
			if n%2 == 0 && awaitAdmin(base, done) {
				drng := rand.New(rand.NewPCG(uint64(n), 23)) // rng stays the loop's alone
				before := log.settled()
				go func() { defer close(driving); log.drive(base, wasm, drng, &variants) }()
				awaitAnswer(log, before, driving, done)
				return time.Duration(rng.Int64N(int64(3 * time.Second)))
			}
			close(driving)
			return time.Duration(rng.Int64N(int64(1500 * time.Millisecond)))
		},
		ended: func(_ int, killed bool) {
			<-driving
			if killed {
				log.check(t, dataDir, keep)
			}
		},
		more: func() { records += writeMore(t, input, want, rng, 100_000) },
	})
	for _, p := range log.problems {
		t.Errorf("unexpected answer: %s", p)
	}
	got := readState(t, dataDir, "wc")
	if diffs := diffState(want, got); len(diffs) > 0 {
		t.Fatalf("state differs from the expectation after %d kills (%d diffs): %s; first: %s", kills, len(diffs), diffSummary(want, got), diffs[0])
	}
	lines, dups := checkOutputs(t, output, want)
	if log.answered < 3 {
		t.Errorf("only %d deploys and rollbacks were answered over %d runs: the kills did not land among deploys", log.answered, runs)
	}
	t.Logf("%d records, %d runs, %d SIGKILLs, %d deploys sent, %d requests answered (%d more refused: input finished): registry and state exact; %d output lines, %d duplicates",
		records, runs, kills, variants, log.answered, log.notRunning, lines, dups)
	fmt.Printf("deploy crash test: %d SIGKILLs, %d deploys sent, %d answered, registry and state exact\n", kills, variants, log.answered)
}

// settled is how many requests were answered, accepted or refused because the input was done.
func (l *deployLog) settled() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.answered + l.notRunning
}

// awaitAnswer waits until a request sent after settled() was before has been answered, the
// deploys stopped or the process exited (done is then refilled for the caller); it gives up
// after 2 minutes, a bound no deploy comes near.
func awaitAnswer(l *deployLog, before int, driving chan struct{}, done chan error) {
	deadline := time.Now().Add(2 * time.Minute)
	for l.settled() == before && time.Now().Before(deadline) {
		select {
		case err := <-done:
			done <- err
			return
		case <-driving:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// awaitAdmin waits until the admin API at base answers, and reports whether it did before the
// process exited (done is then refilled for the caller) or 30 s passed.
func awaitAdmin(base string, done chan error) bool {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			done <- err
			return false
		case <-time.After(20 * time.Millisecond):
		}
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			return true
		}
	}
	return false
}
