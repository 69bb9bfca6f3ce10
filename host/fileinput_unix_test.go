//go:build unix

package host_test

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// A file input that is a named pipe halts its task with an error that points to stdin, before
// opening it: the open would wait for a writer (the host hung at the task's start), and a pipe
// cannot be resumed at a byte position ("illegal seek" once a writer came).
func TestFileInputPipeRefused(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "in.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	h, err := host.New(host.Config{DataDir: filepath.Join(dir, "data"), CacheDir: hosttest.CompileCache(t), Logger: testLogger(t),
		Tasks: []host.TaskConfig{{Name: "pipe", Module: module,
			Inputs: []host.InputConfig{{Name: "in", Path: fifo, Format: "text", KeySeparator: "\t"}},
			Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")}}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "is not a regular file") || !strings.Contains(err.Error(), "stdin") {
			t.Fatalf("Run with a named pipe as a file input: %v; want it refused, pointing to stdin", err)
		}
	case <-time.After(time.Minute): // a guard against the hang, not a measure
		t.Fatal("Run with a named pipe as a file input still runs after a minute: it waits in the open for a writer")
	}
}
