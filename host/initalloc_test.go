package host_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// Issue 6 §6: a module that allocates 1 GiB in its init (over its 64 MiB memory limit) is refused
// with an error naming memory — the guest runtime's own words, carried in the trap error — and
// the process survives: the same module with a sane init then runs in a new host.
func TestHugeAllocationInInit(t *testing.T) {
	dir := t.TempDir()
	tc := kvTask("greedy", guestbuild.Go(t, "testguests/hostile"), writeLines(t, dir, [][2]string{{"k", "v"}}),
		filepath.Join(dir, "out.ndjson"))
	tc.Config = map[string]any{"init": "alloc"}
	tc.Workers = 1
	h, err := host.New(host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	if err == nil {
		err = h.Run(context.Background())
		h.Close()
	}
	if err == nil {
		t.Fatal("a module allocating 1 GiB in init ran")
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "wasmstream_init trapped") || !strings.Contains(err.Error(), "guest stderr: \"runtime: out of memory") {
		t.Errorf("error %q does not say init ran out of memory", err)
	}

	tc.Config = nil
	tc.DeadLetter.Path = filepath.Join(dir, "dead.ndjson")
	hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "data2"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	if outs := readOutputs(t, tc.Output.Path); len(outs) != 1 || outs[0].Value != "v" {
		t.Errorf("after the refused module, a sane one output %+v, want the record echoed", outs)
	}
}
