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
		if err := os.WriteFile(filepath.Join(dir, "in.ndjson"), nil, 0o644); err != nil {
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

// check prints the HTTP grant as configured in YAML, with its defaults, and notes a module that
// imports http_request without one.
func TestCheckPrintsHTTPGrant(t *testing.T) {
	module, err := filepath.Abs(filepath.Join("..", "..", "host", "internal", "modrt", "testdata", "httpguest.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "ws.yaml")
	yaml := `
tasks:
  - name: fetcher
    module: ` + module + `
    inputs: [{path: in.ndjson}]
    grants:
      http:
        allow: [api.example.com, "*.example.org:8443"]
        timeout: 2s
        max_concurrent: 8
  - name: ungranted
    module: ` + module + `
    inputs: [{path: in.ndjson}]
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(cfg), "in.ndjson"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "check", "-c", cfg)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{
		"task fetcher\n",
		"  grants   http api.example.com, *.example.org:8443 (timeout 2s, max timeout 1m0s, 8 at once, request body up to 1048576 bytes, response body up to 4194304 bytes)\n",
		"task ungranted\n",
		"  grants   none\n  note     imports http_request but grants.http is not set: every request fails with ERR_NOT_ALLOWED\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("check output lacks\n%s\ngot:\n%s", want, stdout)
		}
	}

	if err := os.WriteFile(cfg, []byte(strings.Replace(yaml, "timeout: 2s", "timeout: -2s", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, "check", "-c", cfg)
	if code != 2 || !strings.Contains(stderr, "tasks[0].grants.http.timeout") {
		t.Errorf("check with a negative timeout: exit %d\n%s", code, stderr)
	}
}

// deploy of a module importing a capability the task is not granted goes through and prints
// the host's warning on stderr; check notes WASI file calls without grants.dirs.
func TestDeployAndCheckWarnUngrantedCapabilities(t *testing.T) {
	h, _, _, _, wait := adminHost(t, "")
	code, stdout, stderr := runCLI(t, "deploy", "--admin-addr", h.AdminAddr(), "--task", "versioned", modrtFixture("httpguest.wasm"))
	if code != 0 || !strings.Contains(stdout, "deployed: version 2 active") {
		t.Fatalf("deploy: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if want := "wasmstream: warning: task versioned version 2: imports http_request but grants.http is not set: every request fails with ERR_NOT_ALLOWED\n"; !strings.Contains(stderr, want) {
		t.Errorf("deploy's stderr lacks\n%s\ngot:\n%s", want, stderr)
	}
	// Back to the plain module, then forward again: a rollback to the http_request version
	// warns too.
	for _, c := range []struct {
		to   string
		warn bool
	}{{"1", false}, {"2", true}} {
		code, stdout, stderr = runCLI(t, "rollback", "--admin-addr", h.AdminAddr(), "--task", "versioned", "--to", c.to)
		if code != 0 || strings.Contains(stderr, "grants.http is not set") != c.warn {
			t.Errorf("rollback --to %s: exit %d, warned %v, want %v\n%s\n%s", c.to, code, !c.warn, c.warn, stdout, stderr)
		}
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}

	cfg := writeConfig(t, `
tasks:
  - name: files
    module: `+modrtFixture("fsescape.wasm")+`
    inputs: [{path: in.ndjson}]
`)
	if err := os.WriteFile(filepath.Join(filepath.Dir(cfg), "in.ndjson"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, "check", "-c", cfg)
	if want := "  note     imports wasi_snapshot_preview1.path_open but grants.dirs is empty: the module sees no files, every file it opens is missing\n"; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("check: exit %d, stdout lacks\n%s\ngot:\n%s\n%s", code, want, stdout, stderr)
	}
}
