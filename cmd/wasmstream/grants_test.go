package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// check prints the capabilities a task is granted; a granted directory given relative to the
// configuration file is resolved against it, and a missing one is refused naming its key.
func TestCheckPrintsGrants(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "ref"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(hostDir string) string {
		cfg := filepath.Join(dir, "ws.yaml")
		yaml := `
tasks:
  - name: granted
    module: ` + module + `
    inputs: [{path: in.ndjson}]
    grants:
      dirs: [{host: ` + hostDir + `, guest: /ref}]
      env: [WS_TEST]
      real_clock: true
`
		if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	code, stdout, stderr := runCLI(t, "check", "-c", write("ref"))
	if code != 0 {
		t.Fatalf("check: exit %d\n%s", code, stderr)
	}
	want := "  grants   dir " + filepath.Join(dir, "ref") + " -> /ref (read-only)\n           env WS_TEST\n           real clock\n"
	if !strings.Contains(stdout, want) {
		t.Errorf("check output lacks\n%s\ngot:\n%s", want, stdout)
	}

	code, _, stderr = runCLI(t, "check", "-c", write("missing"))
	if code == 0 || !strings.Contains(stderr, "tasks[0].grants.dirs[0].host") {
		t.Errorf("check with a missing granted dir: exit %d\n%s", code, stderr)
	}
}
