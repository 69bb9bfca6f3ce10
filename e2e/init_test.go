package e2e

// `wasmstream init` through the real binary: for each language the scaffolded project, outside
// the repository, passes its own test with `make test` and prints the expected counts with
// `make run`, offline (GOPROXY=off, CARGO_NET_OFFLINE). The projects find their toolchains
// themselves, as the repository's Makefile does: no CARGO, RUSTC or TINYGO is given, and the
// PATH has rustup's toolchain (which lacks the wasm target) first when the machine has one.
// TinyGo runs in TestTinyGoInit, with the other TinyGo tests (guestbuild.TinyGoTool).

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// initWant is what `make run` prints for the scaffold's input.ndjson, sorted by key.
const initWant = `{"output":"counts","key":"alice","value":"1","ts":1700000000000}
{"output":"counts","key":"alice","value":"2","ts":1700000002000}
{"output":"counts","key":"alice","value":"3","ts":1700000003000}
{"output":"counts","key":"bob","value":"1","ts":1700000001000}
{"output":"counts","key":"bob","value":"2","ts":1700000004000}
`

func TestInit(t *testing.T) {
	bin := guestbuild.Binary(t)
	for _, lang := range []string{"go", "rust"} {
		t.Run(lang, func(t *testing.T) { testInit(t, bin, lang, nil) })
	}
}

func TestTinyGoInit(t *testing.T) {
	tinygo := guestbuild.TinyGoTool(t)
	// The project looks for tinygo on the PATH, then where .ci/install-tinygo.sh installs it by
	// default; a TinyGo installed elsewhere (TINYGO_DIR) is given to it.
	var vars []string
	if _, err := exec.LookPath("tinygo"); err != nil && guestbuild.DefaultTinyGo() == "" {
		t.Logf("tinygo %s is not where the project looks: passing TINYGO", tinygo)
		vars = []string{"TINYGO=" + tinygo}
	}
	testInit(t, guestbuild.Binary(t), "tinygo", vars)
}

// testInit scaffolds a lang project with bin, then runs its make test and make run with extra
// make variables.
func testInit(t *testing.T, bin, lang string, vars []string) {
	dir := filepath.Join(t.TempDir(), "my-task")
	code, stdout, stderr := runBinary(t, bin, nil, "init", lang, "my-task", "--dir", dir, "--sdk", guestbuild.Root())
	if code != 0 || !strings.Contains(stdout, "created "+dir) {
		t.Fatalf("init: exit %d\n%s\n%s", code, stdout, stderr)
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	var cargo string
	if lang == "rust" {
		cargo, _ = guestbuild.RustTools(t) // the pair the project must find too
	}
	vars = append(vars, "WASMSTREAM="+bin, "GO="+goBin)
	path := os.Getenv("PATH")
	if home, err := os.UserHomeDir(); err == nil {
		if _, err := os.Stat(filepath.Join(home, ".cargo", "bin", "cargo")); err == nil {
			path = filepath.Join(home, ".cargo", "bin") + string(os.PathListSeparator) + path // rustup's first
		}
	}
	var env []string
	for _, e := range os.Environ() {
		if name, _, _ := strings.Cut(e, "="); name != "CARGO" && name != "RUSTC" && name != "RUSTDOC" && name != "TINYGO" && name != "PATH" {
			env = append(env, e)
		}
	}
	env = append(env, "PATH="+path, "GOPROXY=off", "GOTOOLCHAIN=local", "GOWORK=off", "GOFLAGS=",
		"CARGO_NET_OFFLINE=true",
		// Reuse the compiled SDK between runs (the tests' shared cargo target directory).
		"CARGO_TARGET_DIR="+guestbuild.CargoTargetDir(t))
	make := func(target string) string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"--no-print-directory", target}, vars...)...)
		cmd.Dir = dir
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("make %s in the %s project: %v\n%s\n%s", target, lang, err, out, stderr)
		}
		return string(out)
	}
	make("test")
	out := make("run")
	// The build says which toolchain it used, and TinyGo's LLVM 19 warnings are filtered out.
	used := map[string]string{"go": "go: " + goBin + " (go version", "rust": "rust: " + cargo + " (cargo ", "tinygo": "tinygo: "}[lang]
	if !strings.Contains(out, used) {
		t.Errorf("make run does not say which toolchain built: want %q in\n%s", used, out)
	}
	if strings.Contains(out, "' is not a recognized feature") {
		t.Errorf("make run printed TinyGo's '+bulk-memory-opt' warning:\n%s", out)
	}
	// The counter's state, in the SDKs' typed layout, reads as a number with --decode.
	code, stdout, stderr = runBinary(t, bin, nil, "state", "--task", "my-task", "--key", "alice", "--decode", "seen=i64", "--data-dir", filepath.Join(dir, "data"))
	if want := "alice\tseen\t3\n"; code != 0 || stdout != want {
		t.Errorf("state --decode seen=i64: exit %d, %q, want %q\n%s", code, stdout, want, stderr)
	}
	var lines []string
	for _, l := range strings.SplitAfter(out, "\n") {
		if strings.HasPrefix(l, `{"output"`) {
			lines = append(lines, l)
		}
	}
	if got := sortByKey(t, strings.Join(lines, ""), false); got != initWant {
		t.Errorf("make run printed, sorted by key:\n%s\nwant:\n%s\nall of stdout:\n%s", got, initWant, out)
	}

	// A second init into the same directory refuses, and leaves the project as it was.
	src := "main.go"
	if lang == "rust" {
		src = "src/lib.rs"
	}
	before, err := os.ReadFile(filepath.Join(dir, src))
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runBinary(t, bin, nil, "init", lang, "my-task", "--dir", dir, "--sdk", guestbuild.Root())
	if code != 1 || !strings.Contains(stderr, "is not empty") {
		t.Errorf("init into the project again: exit %d, want 1 naming the non-empty directory\n%s", code, stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, src)); string(after) != string(before) {
		t.Errorf("init into a non-empty directory changed %s", src)
	}
}
