package modrt

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestGrantsValidate(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	dir := t.TempDir()
	_, err := r.Compile(context.Background(), fixture(t, "driver"), Limits{Grants: Grants{
		Dirs: []DirGrant{{Host: dir, Guest: "/ok"}, {Host: filepath.Join(dir, "missing"), Guest: "rel"}, {Guest: "/x"}},
		Env:  []string{"OK", "A=B"},
	}})
	if err == nil {
		t.Fatal("compiled with invalid grants")
	}
	for _, want := range []string{
		"grants: Dirs[1].Host: stat ",
		`grants: Dirs[1].Guest "rel" is not an absolute path`,
		"grants: Dirs[2].Host is empty",
		`grants: Env[1] "A=B" is not a variable name`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "Dirs[0]") || strings.Contains(err.Error(), "Env[0]") {
		t.Errorf("error %q names a valid grant", err)
	}
}

func TestGrantsDescribeAndCopy(t *testing.T) {
	if d := (Grants{}).Describe(); d != nil || !(Grants{}).None() {
		t.Errorf("zero Grants describe as %q", d)
	}
	g := Grants{Dirs: []DirGrant{{Host: "h", Guest: "/r"}, {Host: "w", Guest: "/w", Writable: true}}, Env: []string{"A"}, RealClock: true, Random: true}
	want := []string{"dir h -> /r (read-only)", "dir w -> /w (read-write)", "env A", "real clock", "random"}
	if got := g.Describe(); !slices.Equal(got, want) || g.None() {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	l := Limits{Grants: g}.withDefaults()
	g.Dirs[0].Writable, g.Env[0] = true, "B"
	if l.Grants.Dirs[0].Writable || l.Grants.Env[0] != "A" {
		t.Error("Limits share the caller's grant slices")
	}
}

// A trapping call's error carries the first lines the guest wrote to stderr during that call.
func TestStderrFirstLines(t *testing.T) {
	w := &lineWriter{log: slog.New(slog.DiscardHandler), max: 4096}
	w.Write([]byte("before the call\n"))
	w.resetTail()
	if got := w.lines(); got != "" {
		t.Errorf("after reset: %q", got)
	}
	w.Write([]byte("\nruntime: out of memory\nfatal error: out of memory\n\ngoroutine 1\n"))
	if got, want := w.lines(), "runtime: out of memory | fatal error: out of memory"; got != want {
		t.Errorf("lines = %q, want %q", got, want)
	}
	w.resetTail()
	w.Write([]byte("partial " + strings.Repeat("x", 400)))
	if got := w.lines(); len(got) != tailBytes || !strings.HasPrefix(got, "partial x") {
		t.Errorf("partial line: %q (%d bytes), want it cut to %d", got, len(got), tailBytes)
	}
}

// A trapping call's error carries the last lines the guest wrote to stdout during that call
// (where TinyGo prints a panic), at most tailLines of tailBytes each.
func TestStdoutLastLines(t *testing.T) {
	w := &lineWriter{log: slog.New(slog.DiscardHandler), max: 4096, keepLast: true}
	w.Write([]byte("before the call\n"))
	w.resetTail()
	if got := w.lines(); got != "" {
		t.Errorf("after reset: %q", got)
	}
	for i := range 1000 {
		fmt.Fprintf(w, "progress %d\n\n", i)
	}
	w.Write([]byte("panic: index out of range [3] with length 2\n"))
	if got, want := w.lines(), "progress 999 | panic: index out of range [3] with length 2"; got != want {
		t.Errorf("lines = %q, want %q", got, want)
	}
	if len(w.tail) != tailLines {
		t.Errorf("%d lines kept, want %d", len(w.tail), tailLines)
	}
	w.Write([]byte("panic: " + strings.Repeat("x", 400)))
	if got, prev := w.lines(), "panic: index out of range [3] with length 2 | "; !strings.HasPrefix(got, prev+"panic: xxx") || len(got) != len(prev)+tailBytes {
		t.Errorf("partial line: %q (%d bytes), want the last line and the partial one cut to %d", got, len(got), tailBytes)
	}
}
