package modrt

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

// peakRSS is the process's peak resident set (VmHWM), for the figures.
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// A guest recursing without end (directly and through a table) is stopped by its call-depth
// bound, with an error naming the limit and its config key; the instance is broken, a fresh one
// fails the same way, and a call within the bound is fine. Peak RSS is logged: before the bound,
// one instance's recursion took the runtime's stack to its ceiling (+167 MB of peak RSS).
func TestDeepRecursionStopped(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "deeprecurse", Limits{MaxCallDepth: 5000})
	before := peakRSS()
	for k := 0; k < 2; k++ {
		i := instantiate(t, m, InstanceConfig{Task: "rec"})
		_, err := i.Process(ctx, []abi.Record{{Key: []byte("k")}}, nil)
		var ce *CallError
		var de *CallDepthError
		if !errors.As(err, &ce) || !ce.Trap || !errors.As(err, &de) || de.Limit != 5000 || !i.Broken() {
			t.Fatalf("error %v (broken %v); want a call depth trap", err, i.Broken())
		}
		want := `task "rec": wasmstream_process stopped: call depth exceeded (limit 5000, config key max_call_depth; a frame counts 1 plus 1 per 16 locals)`
		if err.Error() != want {
			t.Fatalf("message\n got %s\nwant %s", err, want)
		}
	}
	t.Logf("peak RSS before the calls %s, after %s", before, peakRSS())
}
