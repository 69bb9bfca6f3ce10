package e2e

// `wasmstream init` through the real binary: for each language the scaffolded project, outside
// the repository, passes its own test with `make test` and prints the expected counts with
// `make run`, offline (GOPROXY=off, CARGO_NET_OFFLINE). TinyGo runs in TestTinyGoInit, with the
// other TinyGo tests (guestbuild.TinyGoTool).

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
	testInit(t, guestbuild.Binary(t), "tinygo", []string{"TINYGO=" + tinygo})
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
	cargo, rustc := "cargo", "rustc"
	if lang == "rust" {
		cargo, rustc = guestbuild.RustTools(t)
	}
	vars = append(vars, "WASMSTREAM="+bin, "GO="+goBin, "CARGO="+cargo)
	env := append(os.Environ(), "GOPROXY=off", "GOTOOLCHAIN=local", "GOWORK=off", "GOFLAGS=",
		"RUSTC="+rustc, "CARGO_NET_OFFLINE=true",
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
