package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// Issue 22 item 3: tables are bounded. Through the real binary, with the default
// max_table_elements (100,000): a module declaring a table of 50,000,000 elements is refused
// with a message naming the limit, and a guest whose table.grow asks for 100,000,000 more
// gets -1 (it fails its call otherwise, which halts the task) while a grow within the limit
// succeeds.
func TestBinaryTablesBounded(t *testing.T) {
	bin := guestbuild.Binary(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(input, []byte("{\"k\":\"a\",\"v\":\"1\"}\n{\"k\":\"b\",\"v\":\"2\"}\n{\"k\":\"c\",\"v\":\"3\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	config := func(module string) string {
		abs, err := filepath.Abs(filepath.Join("testdata", module))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, module+".yaml")
		cfg := fmt.Sprintf(`data_dir: %s
tasks:
  - name: tables
    module: %s
    workers: 2
    retry: {max_attempts: 1, on_exhausted: halt}
    inputs: [{path: %s, key_field: k, value_field: v}]
    output: {type: file, path: %s}
`, filepath.Join(dir, "data-"+module), abs, input, filepath.Join(dir, "out.ndjson"))
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	code, _, stderr := runBinary(t, bin, nil, "check", "-c", config("tablebig.wasm"))
	if want := "table minimum 50000000 elements exceeds the limit of 100000"; code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("check of a module with a 50,000,000-element table: exit %d, stderr:\n%s\nwant a refusal saying %q", code, stderr, want)
	}

	code, _, stderr = runBinary(t, bin, nil, "run", "-c", config("tablegrow.wasm"), "--log-level", "warn")
	if code != 0 {
		t.Errorf("run of a guest growing its table past the limit: exit %d, stderr:\n%s\nwant table.grow to return -1 (exit 0)", code, stderr)
	}
}
