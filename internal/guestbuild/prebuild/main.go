// Command prebuild builds every guest module of the repository (the Go guests with standard Go,
// and with TinyGo when it is installed; the Rust crates) and the wasmstream binary into the
// tests' build directory (guestbuild.Dir, or the one guestbuild.DirEnv names), as the tests
// would. `make bench-bundle` runs it to carry prebuilt modules to a machine without toolchains.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// tb is the testing.TB the builders take, outside a test: a failure ends the program, a skip
// (a missing toolchain) is reported and the build goes on.
type tb struct {
	testing.TB
	skipped bool
}

func (*tb) Helper()                        {}
func (*tb) Logf(format string, a ...any)   { fmt.Fprintf(os.Stderr, format+"\n", a...) }
func (*tb) Fatal(a ...any)                 { fmt.Fprintln(os.Stderr, a...); os.Exit(1) }
func (*tb) Fatalf(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...); os.Exit(1) }
func (t *tb) Skip(a ...any)                { fmt.Fprintln(os.Stderr, a...); t.skipped = true; runtime.Goexit() }
func (t *tb) Skipf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
	t.skipped = true
	runtime.Goexit()
}

// run calls build on a goroutine of its own, so that a skip (runtime.Goexit) ends only it.
func run(build func(t *tb) string) (string, bool) {
	t := &tb{}
	var out string
	done := make(chan struct{})
	go func() {
		defer close(done)
		out = build(t)
	}()
	<-done
	return out, !t.skipped
}

func main() {
	root := guestbuild.Root()
	var goPkgs, crates []string
	for _, pattern := range []string{"examples/wasm/*", "examples/wasm/testguests/*"} {
		dirs, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, d := range dirs {
			rel, _ := filepath.Rel(filepath.Join(root, "examples", "wasm"), d)
			if _, err := os.Stat(filepath.Join(d, "Cargo.toml")); err == nil {
				crates = append(crates, rel)
			} else if m, _ := filepath.Glob(filepath.Join(d, "*.go")); len(m) > 0 {
				goPkgs = append(goPkgs, rel)
			}
		}
	}
	n := 0
	report := func(out string, ok bool) {
		if ok {
			fmt.Println(out)
			n++
		}
	}
	for _, p := range goPkgs {
		report(run(func(t *tb) string { return guestbuild.Go(t, p) }))
		report(run(func(t *tb) string { return guestbuild.TinyGo(t, p) }))
	}
	for _, c := range crates {
		report(run(func(t *tb) string { return guestbuild.Rust(t, c) }))
	}
	report(run(func(t *tb) string { return guestbuild.Binary(t) }))
	fmt.Fprintf(os.Stderr, "prebuild: %d builds in %s\n", n, guestbuild.Dir())
}
