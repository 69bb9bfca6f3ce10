package kafka

import "testing"

// staleLoop takes only the instance ids of this host's loops at or above loops, written as the
// host writes them.
func TestStaleLoop(t *testing.T) {
	for _, c := range []struct {
		id    string
		loops int
		want  bool
	}{
		{"wasmstream-wc-a-loop1", 1, true},
		{"wasmstream-wc-a-loop3", 2, true},
		{"wasmstream-wc-a-loop12", 4, true},
		{"wasmstream-wc-a-loop1", 2, false}, // a loop that still runs
		{"wasmstream-wc-a", 1, false},       // loop 0
		{"wasmstream-wc-b-loop1", 1, false}, // another host's
		{"wasmstream-wc-ab-loop1", 1, false},
		{"wasmstream-wc-a-loop01", 1, false}, // not the host's spelling
		{"wasmstream-wc-a-loopx", 1, false},
		{"wasmstream-wc-a-loop-1", 0, false},
	} {
		if got := staleLoop(c.id, "wasmstream-wc-a", c.loops); got != c.want {
			t.Errorf("staleLoop(%q, loops %d) = %t, want %t", c.id, c.loops, got, c.want)
		}
	}
}
