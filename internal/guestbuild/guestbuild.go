// Package guestbuild builds the repository's guest modules from source for tests and
// benchmarks, so that every test runs real wasm compiled from the code in the repository.
//
// Builds go to a directory shared by the packages of one `go test` run (the repository's
// .build/test directory) and are reused when the output is newer than every source file, so a
// module is compiled once per change, not once per test.
package guestbuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var mu sync.Mutex

// Root returns the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func outDir(tb testing.TB) string {
	dir := filepath.Join(Root(), ".build", "test")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// Go builds the Go guest in examples/wasm/<pkg> (e.g. "wordcount" or "testguests/trapper")
// with standard Go for wasip1 and returns the .wasm path.
func Go(tb testing.TB, pkg string) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	src := filepath.Join(Root(), "examples", "wasm")
	out := filepath.Join(outDir(tb), strings.ReplaceAll(pkg, "/", "_")+".wasm")
	if fresh(out, filepath.Join(src, pkg), filepath.Join(Root(), "guest-sdk", "go"), filepath.Join(Root(), "abi")) {
		return out
	}
	// Several test binaries may build at once: build aside, then rename into place.
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	cmd := exec.Command("go", "build", "-trimpath", "-buildmode=c-shared", "-o", tmp, "./"+pkg)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building Go guest %s: %v\n%s", pkg, err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		tb.Fatal(err)
	}
	return out
}

// TinyGoEnv names the environment variable holding the tinygo command TinyGo builds use;
// `make test-tinygo` sets it to what .ci/install-tinygo.sh installed.
const TinyGoEnv = "WASMSTREAM_TINYGO"

// TinyGoFlags are the flags every TinyGo guest is built with (the README's build command).
var TinyGoFlags = []string{"-target=wasip1", "-buildmode=c-shared", "-scheduler=none", "-no-debug"}

// TinyGo builds the Go guest in examples/wasm/<pkg> with TinyGo (TinyGoFlags) and returns the
// .wasm path, .build/test/tinygo/<pkg with / as _>.wasm, where `make test-tinygo` also builds
// them. It skips the test when WASMSTREAM_TINYGO is unset: TinyGo is not a plain Go
// dependency, and `make test-tinygo` (part of `make test`) installs it and sets the variable.
func TinyGo(tb testing.TB, pkg string) string {
	tb.Helper()
	tinygo := os.Getenv(TinyGoEnv)
	if tinygo == "" {
		tb.Skipf("%s is not set: `make test-tinygo` installs TinyGo and runs this test with it", TinyGoEnv)
	}
	mu.Lock()
	defer mu.Unlock()
	src := filepath.Join(Root(), "examples", "wasm")
	dir := filepath.Join(outDir(tb), "tinygo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(dir, strings.ReplaceAll(pkg, "/", "_")+".wasm")
	if fresh(out, filepath.Join(src, pkg), filepath.Join(Root(), "guest-sdk", "go"), filepath.Join(Root(), "abi")) {
		return out
	}
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	cmd := exec.Command(tinygo, append(append([]string{"build"}, TinyGoFlags...), "-o", tmp, "./"+pkg)...)
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building TinyGo guest %s with %s: %v\n%s", pkg, tinygo, err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		tb.Fatal(err)
	}
	return out
}

// Rust builds the Rust guest crate examples/wasm/<crate> (e.g. "wordcount-rust" or
// "testguests/counter-rust") for wasm32-unknown-unknown with the system's rustc and returns the
// .wasm path. It fails the test when the toolchain is missing:
// the README's set-up installs it.
func Rust(tb testing.TB, crate string) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	src := filepath.Join(Root(), "examples", "wasm", crate)
	name := libName(tb, src)
	// Named after the crate directory: a library called "wordcount" must not overwrite the Go
	// wordcount's module.
	out := filepath.Join(outDir(tb), strings.ReplaceAll(crate, "/", "_")+".wasm")
	if fresh(out, src, filepath.Join(Root(), "guest-sdk", "rust")) {
		return out
	}
	target := filepath.Join(outDir(tb), "cargo-target")
	cargo, rustc := RustToolchain()
	cmd := exec.Command(cargo, "build", "--release", "--target", "wasm32-unknown-unknown", "--target-dir", target)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "RUSTC="+rustc, "CARGO_NET_OFFLINE=true")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building Rust guest %s (install rustc, cargo and libstd-rust-dev-wasm32): %v\n%s", crate, err, b)
	}
	built := filepath.Join(target, "wasm32-unknown-unknown", "release", name+".wasm")
	b, err := os.ReadFile(built)
	if err != nil {
		tb.Fatal(err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, out); err != nil {
		tb.Fatal(err)
	}
	return out
}

// libName reads the crate's library name from its Cargo.toml: [lib] name, else the package
// name, with '-' turned into '_' as cargo does.
func libName(tb testing.TB, dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "Cargo.toml"))
	if err != nil {
		tb.Fatal(err)
	}
	section, pkg, lib := "", "", ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) != "name" {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"`)
		switch section {
		case "[package]":
			pkg = v
		case "[lib]":
			lib = v
		}
	}
	if lib == "" {
		lib = pkg
	}
	return strings.ReplaceAll(lib, "-", "_")
}

// RustToolchain returns the cargo and rustc to build wasm guests with: the system's
// (/usr/bin), whose standard library has the wasm target, when present; otherwise whatever is
// on PATH.
func RustToolchain() (cargo, rustc string) {
	cargo, rustc = "cargo", "rustc"
	if _, err := os.Stat("/usr/bin/cargo"); err == nil {
		cargo = "/usr/bin/cargo"
	}
	if _, err := os.Stat("/usr/bin/rustc"); err == nil {
		rustc = "/usr/bin/rustc"
	}
	return cargo, rustc
}

// fresh reports whether out exists and is newer than every file under the source dirs.
func fresh(out string, dirs ...string) bool {
	st, err := os.Stat(out)
	if err != nil {
		return false
	}
	built := st.ModTime()
	newer := false
	for _, d := range dirs {
		filepath.WalkDir(d, func(path string, de os.DirEntry, err error) error {
			if err != nil || newer {
				return filepath.SkipDir
			}
			if de.IsDir() && (de.Name() == "target" || strings.HasPrefix(de.Name(), ".")) {
				return filepath.SkipDir
			}
			if info, err := de.Info(); err == nil && !de.IsDir() && info.ModTime().After(built) {
				newer = true
			}
			return nil
		})
	}
	return !newer
}

// Binary builds the wasmstream command into the test build directory and returns its path.
func Binary(tb testing.TB) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	out := filepath.Join(outDir(tb), "wasmstream")
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", tmp, "./cmd/wasmstream")
	cmd.Dir = Root()
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building wasmstream: %v\n%s", err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("built wasmstream in %s", time.Since(start).Round(time.Millisecond))
	return out
}

// Describe is for failure messages: the module's path relative to the repository.
func Describe(path string) string {
	rel, err := filepath.Rel(Root(), path)
	if err != nil {
		return path
	}
	return fmt.Sprint(rel)
}

// versionedTag is the placeholder of examples/wasm/testguests/versioned (its Tag constant).
const versionedTag = "ws-version:000000"

// Retag returns a copy of wasm, the module of the testguests/versioned guest, whose tag reads
// "ws-version:<n as 6 digits>": a distinct module version, with distinct bytes, from one build.
// The placeholder sits in a data segment and is rewritten in place, so the module stays valid.
func Retag(tb testing.TB, wasm []byte, n int) []byte {
	tb.Helper()
	if n < 0 || n > 999_999 {
		tb.Fatalf("Retag: version tag %d out of range", n)
	}
	if c := strings.Count(string(wasm), versionedTag); c != 1 {
		tb.Fatalf("Retag: the module holds %d copies of the tag placeholder %q, want 1", c, versionedTag)
	}
	out := []byte(strings.Replace(string(wasm), versionedTag, VersionTag(n), 1))
	return out
}

// VersionTag is the tag a module made by Retag(…, n) emits.
func VersionTag(n int) string { return fmt.Sprintf("ws-version:%06d", n) }

// WithCustomSection returns a copy of wasm with a custom section named name appended: the
// same behaviour, different bytes (a new module version for the registry).
func WithCustomSection(wasm []byte, name string) []byte {
	var body []byte
	body = appendULEB(body, uint64(len(name)))
	body = append(body, name...)
	body = append(body, "wasmstream test"...) // the payload: some runtimes reject an empty one
	out := append([]byte(nil), wasm...)
	out = append(out, 0) // custom section id
	out = appendULEB(out, uint64(len(body)))
	return append(out, body...)
}

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}
