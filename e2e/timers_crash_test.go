package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// TestCrashTimersFireOnce runs the timers test guest through the binary over an input that keeps
// thousands of timers pending at any moment — event-time timers (some re-arming themselves from
// their firing, some replaced, some deleted) and processing-time timers — and kills it with
// SIGKILL at random moments until it completes. Every timer must have fired exactly once in
// total: each firing adds 1 to its key's "fired" state, so a lost firing or one applied twice
// shows in the final state.
func TestCrashTimersFireOnce(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/timers")
	dir := t.TempDir()
	input := filepath.Join(dir, "input.ndjson")
	output := filepath.Join(dir, "out.ndjson")
	gen := &timerInput{rng: rand.New(rand.NewPCG(99, 100)), ts: 1_800_000_000_000, want: map[string]*timerExpect{}}
	gen.write(t, input, 20_000)
	want := gen.want
	cfg := writeConfig(t, dir, module, input, output, "")

	rng := rand.New(rand.NewPCG(3, 5))
	// Even runs are killed once output grew: while timers fire and records flow.
	kills, runs := killLoop(t, bin, cfg, killPlan{
		timeout: 6 * time.Minute,
		live:    randomKills(rng, output, time.Second, 200*time.Millisecond),
		more:    func() { gen.write(t, input, 10_000) },
	})
	got := readState(t, filepath.Join(dir, "data"), "wc")
	var diffs []string
	fired := 0
	for key, w := range want {
		g := got[key]
		if g["fired"] != w.fired || g["records"] != w.records {
			diffs = append(diffs, fmt.Sprintf("%s: fired %d records %d, want %d and %d", key, g["fired"], g["records"], w.fired, w.records))
		}
		fired += w.fired
	}
	if len(got) != len(want) {
		diffs = append(diffs, fmt.Sprintf("%d keys with state, want %d", len(got), len(want)))
	}
	if len(diffs) > 0 {
		if len(diffs) > 20 {
			diffs = diffs[:20]
		}
		t.Fatalf("state after %d kills:\n%s", kills, strings.Join(diffs, "\n"))
	}
	t.Logf("%d records, %d runs, %d SIGKILLs: %d firings over %d keys, each exactly once", gen.records, runs, kills, fired, len(want))
	fmt.Printf("timer crash test: %d SIGKILLs, %d runs, %d records, %d firings exactly once\n", kills, runs, gen.records, fired)
}

type timerExpect struct{ fired, records int }

// timerInput generates the test's input and its expectation. Each call of write appends keys:
// in event-time order, each key sets an event-time timer 5 s of event time ahead that re-arms
// itself 0–3 times, and a processing-time timer due at once; a tenth of the keys then replace
// their event timer, another tenth delete it, both before it fires. Event time advances 1 ms per
// record, so thousands of event timers are pending at any point.
type timerInput struct {
	rng     *rand.Rand
	ts      int64
	next    int // the next key number
	records int
	want    map[string]*timerExpect
}

func (g *timerInput) write(t *testing.T, path string, keys int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	write := func(key, cmd string) {
		g.ts++
		g.records++
		g.want[key].records++
		line, _ := json.Marshal(map[string]any{"user": key, "ts": g.ts, "text": cmd})
		w.Write(line)
		w.WriteByte('\n')
	}
	type later struct {
		at       int
		key, cmd string
	}
	var pending []later
	for i := g.next; i < g.next+keys; i++ {
		key := fmt.Sprintf("k%06d", i)
		g.want[key] = &timerExpect{}
		chain := g.rng.IntN(4)
		write(key, fmt.Sprintf("set t e %d again:%d", g.ts+5000, chain))
		write(key, "set q p 0 once")
		g.want[key].fired = chain + 1 + 1
		switch g.rng.IntN(10) {
		case 0:
			chain2 := g.rng.IntN(4)
			pending = append(pending, later{i + 1 + g.rng.IntN(500), key, fmt.Sprintf("set t e %d again:%d", g.ts+6000, chain2)})
			g.want[key].fired = chain2 + 1 + 1
		case 1:
			pending = append(pending, later{i + 1 + g.rng.IntN(500), key, "del t"})
			g.want[key].fired = 1
		}
		for len(pending) > 0 && pending[0].at <= i {
			write(pending[0].key, pending[0].cmd)
			pending = pending[1:]
		}
	}
	for _, p := range pending {
		write(p.key, p.cmd)
	}
	g.next += keys
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}
