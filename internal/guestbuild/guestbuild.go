// Package guestbuild builds the repository's guest modules from source for tests and
// benchmarks, so that every test runs real wasm compiled from the code in the repository.
//
// Builds go to a directory outside the source tree shared by the packages of every `go test`
// run of one checkout (Dir) and are reused when the output is newer than every source file, so a
// module is compiled once per change, not once per test. No test writes into the source tree.
//
// A test that needs a program beyond Go (rustc and cargo, wat2wasm, tinygo, kcat, chromium)
// asks for it with Tool, RustTools or TinyGoTool: when the program is missing the test is
// skipped with a message naming it and `make deps`, which installs it; when the environment
// variable CI is set it fails instead, so that CI never skips silently.
package guestbuild

import (
	"crypto/sha256"
	"encoding/hex"
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

// DirEnv names the environment variable that, when set, replaces Dir, and makes every build
// found there used as it is, however old: no freshness check, no toolchain. A bundle of prebuilt
// benchmarks (`make bench-bundle`) sets it to the folder of its modules, for a machine with
// neither the sources the binaries were compiled from nor Go, Rust or TinyGo. A build missing
// from the folder is made as usual.
const DirEnv = "WASMSTREAM_GUEST_DIR"

// Dir returns the directory the builds go to: the one DirEnv names if set, else
// <user cache dir>/wasmstream-test/<hash>, where hash is the first 12 hex digits of the SHA-256
// of Root, so that two checkouts never share (and never mistake for fresh) each other's builds.
// It falls back to the system's temporary directory when there is no user cache directory.
// `go run ./internal/guestbuild/cachedir` prints it.
func Dir() string {
	if d := os.Getenv(DirEnv); d != "" {
		return d
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	sum := sha256.Sum256([]byte(Root()))
	return filepath.Join(base, "wasmstream-test", hex.EncodeToString(sum[:6]))
}

// prebuilt returns the path of a build under the folder DirEnv names if it is there, or "" to
// build as usual.
func prebuilt(name string) string {
	if os.Getenv(DirEnv) == "" {
		return ""
	}
	out := filepath.Join(Dir(), name)
	if _, err := os.Stat(out); err != nil {
		return ""
	}
	return out
}

func outDir(tb testing.TB) string {
	dir := Dir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// tools are the programs beyond Go that tests use, with the Debian packages that hold them.
var tools = map[string]struct {
	names []string // the commands to look for, in order
	pkg   string
}{
	"rustc":    {[]string{"rustc"}, "rustc libstd-rust-dev-wasm32"},
	"cargo":    {[]string{"cargo"}, "cargo"},
	"wat2wasm": {[]string{"wat2wasm"}, "wabt"},
	"kcat":     {[]string{"kcat"}, "kcat"},
	"chromium": {[]string{"chromium", "chromium-browser"}, "chromium"},
}

// Tool returns the path of the named program (a key of the table above: rustc, cargo,
// wat2wasm, kcat, chromium). When it is missing the test is skipped, or fails if the
// environment variable CI is set.
func Tool(tb testing.TB, name string) string {
	tb.Helper()
	tl, ok := tools[name]
	if !ok {
		tb.Fatalf("guestbuild.Tool: unknown tool %q", name)
	}
	for _, n := range tl.names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	missing(tb, fmt.Sprintf("%s is not installed (Debian package %s)", name, tl.pkg))
	return ""
}

// missing skips the test with why and the way to install what is missing, or fails it when
// the environment variable CI is set.
func missing(tb testing.TB, why string) {
	tb.Helper()
	msg := why + ": `make deps` installs it"
	if os.Getenv("CI") != "" {
		tb.Fatal(msg + " (CI is set, so this test fails instead of skipping)")
		return
	}
	tb.Skip(msg + "; skipping (set CI=true to make this a failure)")
}

// Go builds the Go guest in examples/wasm/<pkg> (e.g. "wordcount" or "testguests/trapper")
// with standard Go for wasip1 and returns the .wasm path.
func Go(tb testing.TB, pkg string) string {
	tb.Helper()
	if out := prebuilt(strings.ReplaceAll(pkg, "/", "_") + ".wasm"); out != "" {
		return out
	}
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

// TinyGoFlags are the flags every TinyGo guest is built with (the build command of docs/writing-tasks.md).
var TinyGoFlags = []string{"-target=wasip1", "-buildmode=c-shared", "-scheduler=none", "-no-debug"}

// TinyGoTool returns the tinygo command: the one WASMSTREAM_TINYGO names, else tinygo on the
// PATH, else the one .ci/install-tinygo.sh installs by default (DefaultTinyGo), where the
// projects of `wasmstream init tinygo` look too. TinyGo is not a plain Go dependency: `make
// deps` installs it and `make test-tinygo` sets the variable. Without it the test is skipped,
// or fails if the environment variable CI is set.
func TinyGoTool(tb testing.TB) string {
	tb.Helper()
	if tg := os.Getenv(TinyGoEnv); tg != "" {
		return tg
	}
	if p, err := exec.LookPath("tinygo"); err == nil {
		return p
	}
	if p := DefaultTinyGo(); p != "" {
		return p
	}
	missing(tb, fmt.Sprintf("tinygo is not on the PATH, nor installed by `make tinygo` under the user's cache directory, and %s is not set (`make tinygo` prints the command to set it to)", TinyGoEnv))
	return ""
}

// DefaultTinyGo returns the tinygo command .ci/install-tinygo.sh installs when TINYGO_DIR is
// not set, ${XDG_CACHE_HOME:-~/.cache}/wasmstream-tinygo/v<version>/tinygo, or "" when there is
// none.
func DefaultTinyGo() string {
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	found, _ := filepath.Glob(filepath.Join(cache, "wasmstream-tinygo", "v*", "tinygo"))
	if len(found) == 0 {
		return ""
	}
	return found[len(found)-1] // the highest version, as the glob sorts them
}

// TinyGo builds the Go guest in examples/wasm/<pkg> with TinyGo (TinyGoFlags, the command of
// TinyGoTool) and returns the .wasm path, <Dir>/tinygo/<pkg with / as _>.wasm, where
// `make test-tinygo` also builds them.
func TinyGo(tb testing.TB, pkg string) string {
	tb.Helper()
	if out := prebuilt(filepath.Join("tinygo", strings.ReplaceAll(pkg, "/", "_")+".wasm")); out != "" {
		return out
	}
	tinygo := TinyGoTool(tb)
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
// "testguests/counter-rust") for wasm32-unknown-unknown with the toolchain of RustTools and
// returns the .wasm path.
func Rust(tb testing.TB, crate string) string {
	tb.Helper()
	if out := prebuilt(strings.ReplaceAll(crate, "/", "_") + ".wasm"); out != "" {
		return out
	}
	cargo, rustc := RustTools(tb)
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
	target := CargoTargetDir(tb)
	cmd := exec.Command(cargo, "build", "--release", "--target", "wasm32-unknown-unknown", "--target-dir", target)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "RUSTC="+rustc, "CARGO_NET_OFFLINE=true", rustFlags())
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

// rustFlags is the CARGO_ENCODED_RUSTFLAGS setting of a Rust guest build: the user's RUSTFLAGS
// and the repository's path mapped to a fixed name, so that a module's panic locations name no
// machine path. (A module's bytes still depend on the clone's path: cargo hashes a path
// dependency's location into its symbol names, so the fuel golden's Rust rows are compared only
// in the checkout that wrote them.)
func rustFlags() string {
	flags := strings.Fields(os.Getenv("RUSTFLAGS"))
	flags = append(flags, "--remap-path-prefix="+Root()+"=wasmstream")
	return "CARGO_ENCODED_RUSTFLAGS=" + strings.Join(flags, "\x1f")
}

// RustTools returns the cargo and rustc to build wasm guests with: the system's (/usr/bin),
// whose standard library has the wasm target, when present; otherwise those on the PATH. When
// either is missing the test is skipped, or fails if the environment variable CI is set.
func RustTools(tb testing.TB) (cargo, rustc string) {
	tb.Helper()
	find := func(name string) string {
		if _, err := os.Stat("/usr/bin/" + name); err == nil {
			return "/usr/bin/" + name
		}
		return Tool(tb, name)
	}
	return find("cargo"), find("rustc")
}

// CargoTargetDir is the cargo target directory Rust builds share, under Dir.
func CargoTargetDir(tb testing.TB) string {
	return filepath.Join(outDir(tb), "cargo-target")
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

// binaryBuilt is the wasmstream command Binary built in this process, once built: the sources
// do not change while a test binary runs, so every later call returns it as it is.
var binaryBuilt string

// Binary builds the wasmstream command into the test build directory and returns its path. It
// builds once per test process (a package's run): later calls return the same binary.
func Binary(tb testing.TB) string {
	tb.Helper()
	if out := prebuilt("wasmstream"); out != "" {
		return out
	}
	mu.Lock()
	defer mu.Unlock()
	if binaryBuilt != "" {
		return binaryBuilt
	}
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
	binaryBuilt = out
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
