// Package hosttest starts a host.Host for a test: the one place tests create one, run it in the
// background until it is ready, and stop it. Every running host a test starts through it is
// stopped and closed when the test ends, even when the test fails half-way.
//
//	h := hosttest.Start(t, cfg) // running and Ready; h.Stats(), h.Deploy(…) as on a *host.Host
//	…
//	if err := h.Stop(); err != nil { // cancels Run and returns its error
//		t.Fatal(err)
//	}
package hosttest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// CompileCache returns the compilation cache the hosts of tests share: a directory beside the
// guest builds (guestbuild.Dir), outside the source tree. wazero writes each entry to a temporary
// file and renames it into place, so test processes running at once may share it; its keys
// cover the module's bytes and wazero's version, so a stale entry is never used.
func CompileCache(tb testing.TB) string {
	dir := filepath.Join(guestbuild.Dir(), "compile-cache")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// New creates a host from cfg, failing the test if cfg is refused; it is closed when the test
// ends. Unless cfg names a CacheDir, the host keeps its compiled modules in CompileCache, so a
// module compiles once for all the tests, not once per host.
func New(tb testing.TB, cfg host.Config) *host.Host {
	tb.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = CompileCache(tb)
	}
	h, err := host.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Close() })
	return h
}

// RunToEnd creates a host from cfg and runs it until Run returns by itself (every input is
// finite), failing the test if Run fails.
func RunToEnd(tb testing.TB, cfg host.Config) {
	tb.Helper()
	if err := New(tb, cfg).Run(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// Running is a host whose Run runs in the background. It embeds the *host.Host.
type Running struct {
	*host.Host
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's result, once done is closed
}

// Start creates a host from cfg and runs it (Go).
func Start(tb testing.TB, cfg host.Config) *Running {
	tb.Helper()
	return Go(tb, New(tb, cfg))
}

// Go runs h in the background and waits until it is Ready, failing the test if Run returns
// before. When the test ends, a host still running is stopped.
func Go(tb testing.TB, h *host.Host) *Running {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{Host: h, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = h.Run(ctx)
	}()
	tb.Cleanup(func() { r.Stop() })
	select {
	case <-h.Ready():
	case <-r.done:
		tb.Fatalf("host: Run returned before it was ready: %v", r.err)
	}
	return r
}

// Stop cancels Run and returns its error once it returned. Calling it again returns the same.
func (r *Running) Stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// Wait returns Run's error once Run returned by itself (its inputs ended, or a task failed).
func (r *Running) Wait() error {
	<-r.done
	return r.err
}

// Done is closed once Run returned.
func (r *Running) Done() <-chan struct{} { return r.done }

// WaitFor polls cond every 10 ms until it holds, failing the test with what once timeout passed.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			tb.Fatalf("%s: not after %s", what, timeout)
		}
	}
}

// LongEnv names the environment variable that makes Long true: `make test-long` sets it.
const LongEnv = "WASMSTREAM_TEST_LONG"

// Long reports whether the tests run their long form: the full kill counts of the crash tests
// and the full sizes of the load tests. `make test` (CI) runs the short form, which checks the
// same properties on fewer kills and records; `make test-long` (WASMSTREAM_TEST_LONG=1) runs
// the long one.
func Long() bool {
	v := os.Getenv(LongEnv)
	return v != "" && v != "0" && v != "false"
}

// Scale is full under Long and short otherwise: a kill count or a record count that the long
// form raises.
func Scale(short, full int) int {
	if Long() {
		return full
	}
	return short
}
