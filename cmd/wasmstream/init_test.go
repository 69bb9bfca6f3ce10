package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// init refuses what it cannot scaffold with a usage error naming the problem.
func TestInitUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown language", []string{"init", "java", "t"}, `unknown language "java": use go, tinygo or rust`},
		{"bad name", []string{"init", "go", "My Task"}, `project name "My Task"`},
		{"name missing", []string{"init", "go"}, "accepts 2 arg(s)"},
		{"not a checkout", []string{"init", "rust", "t", "--dir", filepath.Join(dir, "t"), "--sdk", dir}, "not a wasmstream checkout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, exitUsage, tc.want, stderr)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused init wrote %v", entries)
	}
}

// Without --sdk, WASMSTREAM_SDK or a checkout around the binary or the working directory, init
// writes the project with placeholder paths and says what to edit; WASMSTREAM_SDK names one.
func TestInitLocatesSDK(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd) // outside the repository; the test binary is too
	t.Setenv(sdkEnv, "")
	code, stdout, stderr := runCLI(t, "init", "go", "lost")
	if code != 0 || !strings.Contains(stderr, "no wasmstream checkout found") || !strings.Contains(stderr, "--sdk PATH") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	gomod, err := os.ReadFile(filepath.Join(wd, "lost", "go.mod"))
	if err != nil || !strings.Contains(string(gomod), "// \tgithub.com/wasmstream/wasmstream/guest-sdk/go => /path/to/wasmstream/guest-sdk/go") {
		t.Errorf("go.mod without an SDK: %v\n%s", err, gomod)
	}

	repo := filepath.Dir(filepath.Dir(startDir))
	t.Setenv(sdkEnv, filepath.Join(repo, "guest-sdk", "rust"))
	code, stdout, stderr = runCLI(t, "init", "rust", "found")
	if code != 0 || !strings.Contains(stdout, "SDK: the wasmstream checkout "+repo) {
		t.Fatalf("with %s: exit %d\n%s\n%s", sdkEnv, code, stdout, stderr)
	}
	cargo, err := os.ReadFile(filepath.Join(wd, "found", "Cargo.toml"))
	if want := `wasmstream = { path = "` + filepath.ToSlash(repo) + `/guest-sdk/rust" }`; err != nil || !strings.Contains(string(cargo), want) {
		t.Errorf("Cargo.toml lacks %s: %v\n%s", want, err, cargo)
	}
}

// startDir is the package directory (cmd/wasmstream) the test binary started in.
var startDir = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return wd
}()
