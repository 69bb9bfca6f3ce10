package host_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
	"github.com/wasmstream/wasmstream/store"
)

// A second host on a data directory a running host holds is refused at once, saying that the
// directory is in use and that each host needs its own: before, "store: database is locked by
// another user: <dir>/state", which names neither.
func TestDataDirInUseRefused(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()
	stdin, feed := io.Pipe()
	t.Cleanup(func() { feed.Close() })
	cfg := func(name string, in host.InputConfig) host.Config {
		return host.Config{DataDir: filepath.Join(dir, "data"), CacheDir: hosttest.CompileCache(t), Logger: testLogger(t), Stdin: stdin,
			Tasks: []host.TaskConfig{{Name: name, Module: module, Inputs: []host.InputConfig{in},
				Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, name+".ndjson")}}}}
	}
	first := hosttest.Start(t, cfg("first", host.InputConfig{Name: "in", Type: "stdin", Format: "text", KeySeparator: "\t"}))
	select {
	case <-first.Ready(): // it holds the store
	case <-first.Done():
		t.Fatalf("the first host stopped: %v", first.Wait())
	}

	second, err := host.New(cfg("second", host.InputConfig{Name: "in", Type: "stdin", Format: "text", KeySeparator: "\t"}))
	if err != nil {
		t.Fatal(err)
	}
	err = second.Run(context.Background())
	if !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), "is in use by another wasmstream process") ||
		!strings.Contains(err.Error(), "data directory of its own") {
		t.Fatalf("a second host on the data directory: %v; want it refused, saying the directory is in use", err)
	}
	feed.Close()
	if err := first.Wait(); err != nil {
		t.Fatalf("the first host: %v", err)
	}
}
