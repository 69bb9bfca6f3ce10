package modrt

import (
	"fmt"
	"testing"
)

// TestScopeAllocs checks that putting a batch's keys in the scope copies none of them: a call
// over 256 keys costs the index's allocations once, and none per key once the index exists.
func TestScopeAllocs(t *testing.T) {
	keys := make([][]byte, 256)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("user%05d", i))
	}
	var s scope
	run := func() {
		s.reset()
		for _, k := range keys {
			s.add(k)
		}
		for _, k := range keys {
			if s.find(k) == nil {
				t.Fatalf("key %q not in the scope", k)
			}
		}
	}
	run() // the index and the key list reach their size
	if got := testing.AllocsPerRun(20, run); got > 0 {
		t.Errorf("a scope of %d keys: %.0f allocations per call, want 0", len(keys), got)
	}
}
