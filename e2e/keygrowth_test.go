package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// Sandbox review (one key's state growing without end): a guest putting a new name on every
// record of one hot key, no changelog, through the binary. The host holds a key's whole state in
// memory while it runs (and loads all of it again after a restart), so max_state_bytes_per_key
// bounds it: the record whose put would take the key past it is dead-lettered naming the limit,
// the key keeps the names it had, and another key goes on. Before the bound every put succeeded
// (10^6 names of 8 bytes on one key: 414 MB peak RSS to load it again after a restart).
func TestKeyStateBounded(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/growkey")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	// A name "n0000042" with the value "1" counts 8 + 1 + 64 bytes, the key 256 + 3: 133 names
	// fit in 10000 bytes, and the 134th would make 10041.
	const limit, perName, hot, cold = 10000, 8 + 1 + 64, 200, 50
	fits := (limit - 256 - len("hot")) / perName
	var b strings.Builder
	for i := range hot {
		fmt.Fprintf(&b, `{"user":"hot","text":"put n%07d","ts":%d}`+"\n", i, 1000+i)
		if i < cold {
			fmt.Fprintf(&b, `{"user":"cold","text":"put n%07d","ts":%d}`+"\n", i, 1000+i)
		}
	}
	if err := os.WriteFile(input, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, module, input, filepath.Join(dir, "out.ndjson"),
		fmt.Sprintf("    max_state_bytes_per_key: %d\n    retry: {max_attempts: 2, backoff: 1ms, max_backoff: 2ms, max_consecutive_failures: -1}\n", limit))
	if code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	st := readState(t, filepath.Join(dir, "data"), "wc")
	if len(st["hot"]) != fits || len(st["cold"]) != cold {
		t.Errorf("hot has %d names, cold %d; want %d (what fits in %d bytes) and %d", len(st["hot"]), len(st["cold"]), fits, limit, cold)
	}
	for i := range fits {
		if st["hot"][fmt.Sprintf("n%07d", i)] != 1 {
			t.Fatalf("hot lacks n%07d: the first %d puts fit", i, fits)
		}
	}
	dead := readJSONLines(t, filepath.Join(dir, "data", "wc.deadletter.ndjson"))
	if len(dead) != hot-fits {
		t.Fatalf("%d dead letters, want %d (the puts past the limit)", len(dead), hot-fits)
	}
	const want = `the state of key "hot" would take 10041 bytes in memory`
	for _, d := range dead {
		msg, _ := d["error"].(string)
		if d["key"] != "hot" || !strings.Contains(msg, "max_state_bytes_per_key (10000)") {
			t.Fatalf("dead letter %v; want key hot and the limit named", d)
		}
	}
	if msg, _ := dead[0]["error"].(string); !strings.Contains(msg, want) {
		t.Errorf("first dead letter's error %q; want %q", msg, want)
	}
}

// A name written many times in one call counts once against max_state_bytes_per_key, as the
// last write leaves it: a record putting one name 200 times on a key with a 1000-byte bound is
// stored. Before, each write counted as a new name (200 × 66 bytes) and the record was
// dead-lettered naming the limit, though the key would hold one name of 3 bytes.
func TestKeyStateNameWrittenTwiceCountsOnce(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/growkey")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	in := `{"user":"hot","text":"putn x 200","ts":1000}` + "\n" + `{"user":"hot","text":"put y","ts":1001}` + "\n"
	if err := os.WriteFile(input, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, module, input, filepath.Join(dir, "out.ndjson"),
		"    max_state_bytes_per_key: 1000\n    retry: {max_attempts: 1, max_consecutive_failures: -1}\n")
	if code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	if dead, err := os.ReadFile(filepath.Join(dir, "data", "wc.deadletter.ndjson")); err == nil && len(dead) > 0 {
		t.Fatalf("dead letters %s; want none: the key holds two names", dead)
	}
	st := readState(t, filepath.Join(dir, "data"), "wc")
	if st["hot"]["x"] != 200 || st["hot"]["y"] != 1 {
		t.Errorf("hot holds %v; want x 200 and y 1", st["hot"])
	}
}
