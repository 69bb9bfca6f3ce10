package e2e

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// liveRun is a `wasmstream run` of a configuration, fed on its stdin, that a test watches while
// it runs. The test's cleanup kills it if it is still running.
type liveRun struct {
	t      *testing.T
	stdin  io.WriteCloser
	stderr *lockedBuffer
	exited chan error // the process's exit, once
}

// startLive writes cfg to dir/wasmstream.yaml and starts `bin run` on it at log level warn,
// with its stdin a pipe and its stderr kept for failure messages.
func startLive(t *testing.T, bin, dir, cfg string) *liveRun {
	t.Helper()
	cfgPath := filepath.Join(dir, "wasmstream.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "-c", cfgPath, "--log-level", "warn")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &liveRun{t: t, stdin: stdin, stderr: &lockedBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { r.exited <- cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-waited
	})
	return r
}

// await polls cond every 20 ms until it holds. It fails the test if the binary exits first, or
// after 60 s, a guard against hanging, not a measurement.
func (r *liveRun) await(what string, cond func() bool) {
	r.t.Helper()
	r.awaitShowing(what, cond, nil)
}

// awaitShowing is await whose failure after 60 s also shows last(), say the last scrape.
func (r *liveRun) awaitShowing(what string, cond func() bool, last func() string) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		select {
		case err := <-r.exited:
			r.t.Fatalf("the binary exited (%v) while waiting for %s; stderr:\n%s", err, what, r.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			if last != nil {
				r.t.Fatalf("still waiting for %s after 60 s; last scrape:\n%s\nstderr:\n%s", what, last(), r.stderr.String())
			}
			r.t.Fatalf("still waiting for %s after 60 s; stderr:\n%s", what, r.stderr.String())
		}
	}
}

// closeAndWait closes the binary's stdin, its input's end, and fails the test unless the binary
// then exits cleanly within 60 s.
func (r *liveRun) closeAndWait() {
	r.t.Helper()
	r.stdin.Close()
	select {
	case err := <-r.exited:
		if err != nil {
			r.t.Fatalf("exit: %v; stderr:\n%s", err, r.stderr.String())
		}
	case <-time.After(60 * time.Second):
		r.t.Fatalf("the binary did not exit after its input ended; stderr:\n%s", r.stderr.String())
	}
}
