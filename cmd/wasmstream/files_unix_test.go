//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPipeInputRefused: a file input that is a pipe (--input <(zcat f.gz), a named pipe) cannot
// be resumed at a byte position: run refuses it as a configuration error that points to stdin.
// Before, the task halted with "seek /dev/fd/63: illegal seek".
func TestPipeInputRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "in.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	module := filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(module, []byte("not wasm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "run", "--module", module, "--input", fifo, "--data-dir", filepath.Join(dir, "data"))
	if want := "--input: " + fifo + " is not a regular file"; code != exitUsage || !strings.Contains(stderr, want) || !strings.Contains(stderr, "--input -") {
		t.Errorf("run --input FIFO: exit %d, stderr %q; want %d and %q, naming stdin", code, stderr, exitUsage, want)
	}
}
