package guestbuild

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records Skip and Fatal instead of stopping the goroutine.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()               {}
func (r *recorder) Skip(args ...any)      { r.skipped = strings.TrimSpace(sprint(args)) }
func (r *recorder) Fatal(args ...any)     { r.failed = strings.TrimSpace(sprint(args)) }
func (r *recorder) Fatalf(string, ...any) { r.failed = "fatalf" }

func sprint(args []any) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteString(a.(string))
	}
	return b.String()
}

// A missing tool skips the test naming the tool and `make deps`, unless CI is set: then the
// test fails.
func TestMissingTool(t *testing.T) {
	tools["nonexistent"] = struct {
		names []string
		pkg   string
	}{[]string{"wasmstream-no-such-program"}, "no-such-package"}
	defer delete(tools, "nonexistent")

	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		r := &recorder{TB: t}
		if p := Tool(r, "nonexistent"); p != "" {
			t.Fatalf("CI=%q: Tool returned %q for a missing program", ci, p)
		}
		msg := r.skipped
		if ci != "" {
			msg = r.failed
			if r.skipped != "" {
				t.Errorf("CI=%q: skipped (%q); want a failure", ci, r.skipped)
			}
		} else if r.failed != "" {
			t.Errorf("CI unset: failed (%q); want a skip", r.failed)
		}
		for _, want := range []string{"nonexistent is not installed", "no-such-package", "make deps"} {
			if !strings.Contains(msg, want) {
				t.Errorf("CI=%q: message %q lacks %q", ci, msg, want)
			}
		}
	}

	t.Setenv(TinyGoEnv, "")
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", "")
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	r := &recorder{TB: t}
	TinyGoTool(r)
	if !strings.Contains(r.skipped, "tinygo") || !strings.Contains(r.skipped, TinyGoEnv) || r.failed != "" {
		t.Errorf("TinyGoTool without tinygo: skipped %q, failed %q", r.skipped, r.failed)
	}

	// Where .ci/install-tinygo.sh installs it by default, it is found.
	want := filepath.Join(cache, "wasmstream-tinygo", "v0.41.0", "tinygo")
	if err := os.MkdirAll(filepath.Dir(want), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(want, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = &recorder{TB: t}
	if got := TinyGoTool(r); got != want || r.skipped != "" || r.failed != "" {
		t.Errorf("TinyGoTool with an installed tinygo: %q (skipped %q, failed %q), want %q", got, r.skipped, r.failed, want)
	}
}

// Builds go outside the source tree, to a directory of this checkout's own.
func TestDirOutsideTree(t *testing.T) {
	d := Dir()
	if rel, err := filepath.Rel(Root(), d); err == nil && !strings.HasPrefix(rel, "..") {
		t.Errorf("Dir() = %s is inside the source tree %s", d, Root())
	}
	_, file, _, _ := runtime.Caller(0)
	if !strings.HasPrefix(file, Root()) {
		t.Errorf("Root() = %s does not hold this file %s", Root(), file)
	}
}

// With DirEnv set, builds found in its folder are used as they are, with no toolchain and no
// freshness check (a benchmark bundle on a machine without either); what is not there is built.
func TestPrebuiltDir(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(DirEnv, dir)
	if Dir() != dir {
		t.Fatalf("Dir() = %s with %s=%s", Dir(), DirEnv, dir)
	}
	for name, build := range map[string]func(testing.TB) string{
		"testguests_noop.wasm":      func(tb testing.TB) string { return Go(tb, "testguests/noop") },
		"testguests_noop-rust.wasm": func(tb testing.TB) string { return Rust(tb, "testguests/noop-rust") },
		"wasmstream":                Binary,
	} {
		want := filepath.Join(dir, name)
		if err := os.WriteFile(want, []byte("prebuilt"), 0o644); err != nil {
			t.Fatal(err)
		}
		// Older than every source file: without DirEnv it would be rebuilt.
		old := time.Unix(1, 0)
		if err := os.Chtimes(want, old, old); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", t.TempDir()) // no go, cargo or rustc to build with
		r := &recorder{TB: t}
		if got := build(r); got != want || r.failed != "" || r.skipped != "" {
			t.Errorf("%s: got %q (failed %q, skipped %q), want the prebuilt %s", name, got, r.failed, r.skipped, want)
		}
		if b, _ := os.ReadFile(want); string(b) != "prebuilt" {
			t.Errorf("%s was rebuilt", name)
		}
	}
}
