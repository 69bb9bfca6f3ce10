package main

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/spf13/cobra"
)

// scaffoldFS holds the templates of `wasmstream init`, embedded so that the binary scaffolds a
// project anywhere, offline. They end in .tmpl so that the go command never takes them for this
// module's own files (a go.mod would even cut its directory out of the module).
//
//go:embed scaffold
var scaffoldFS embed.FS

// sdkEnv names the environment variable init reads the SDK checkout from when --sdk is not
// given.
const sdkEnv = "WASMSTREAM_SDK"

// scaffoldFile is one generated file: its template and its path in the project.
type scaffoldFile struct{ tmpl, path string }

// scaffoldFiles are the files of each language's project.
var scaffoldFiles = map[string][]scaffoldFile{
	"go": {
		{"go/main.go.tmpl", "main.go"},
		{"go/main_test.go.tmpl", "main_test.go"},
		{"go/go.mod.tmpl", "go.mod"},
		{"go/Makefile.tmpl", "Makefile"},
	},
	"rust": {
		{"rust/lib.rs.tmpl", "src/lib.rs"},
		{"rust/Cargo.toml.tmpl", "Cargo.toml"},
		{"rust/Makefile.tmpl", "Makefile"},
	},
	"common": {
		{"common/config.yaml.tmpl", "config.yaml"},
		{"common/input.ndjson.tmpl", "input.ndjson"},
		{"common/README.md.tmpl", "README.md"},
		{"common/gitignore.tmpl", ".gitignore"},
	},
}

// scaffoldData is what the templates see.
type scaffoldData struct {
	Lang   string // go, tinygo or rust
	Name   string // the project, task and module name
	Crate  string // Name as a Rust library name ('-' as '_')
	SDK    string // the wasmstream checkout, with forward slashes; empty when none was found
	TinyGo bool
	Rust   bool
}

func newInitCommand(stdout, stderr io.Writer) *cobra.Command {
	var dir, sdk string
	cmd := &cobra.Command{
		Use:   "init go|tinygo|rust NAME",
		Short: "Create a task project: source, unit test, config, Makefile",
		Long: `Init creates a directory NAME (or --dir) holding a task project that builds and passes its
test at once: a keyed counter using the SDK's typed state and emit, its unit test against the
SDK's test host, a config.yaml running it over a sample input, a Makefile (build, test, run)
and a README. go builds with standard Go (GOOS=wasip1), tinygo with TinyGo, rust with cargo
for wasm32-unknown-unknown. It refuses a directory that exists and is not empty.

The SDK is not on a module proxy or crates.io yet, so the project builds against a checkout
of wasmstream: --sdk PATH (the checkout, or its guest-sdk/go or guest-sdk/rust), else $` + sdkEnv + `,
else the checkout the running wasmstream binary or the current directory is in. The project
then points at its absolute path (go.mod replace lines for the SDK and abi, a Cargo path
dependency) and builds offline. When none is found, the project is written with placeholder
paths to edit, and init says so.`,
		Example: `  wasmstream init go mytask && cd mytask && make test && make run
  wasmstream init rust mytask --sdk ~/src/wasmstream
  wasmstream init tinygo mytask --dir tasks/mytask`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInit(stdout, stderr, args[0], args[1], dir, sdk)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the directory to create (default NAME)")
	cmd.Flags().StringVar(&sdk, "sdk", "", "a wasmstream checkout to build against (default $"+sdkEnv+", else the one this binary or the current directory is in)")
	return cmd
}

// runInit creates the project name in language lang, in dir (default name), against the SDK
// checkout sdk (or the one locateSDK finds).
func runInit(stdout, stderr io.Writer, lang, name, dir, sdk string) error {
	if _, ok := map[string]bool{"go": true, "tinygo": true, "rust": true}[lang]; !ok {
		return usageError("init: unknown language %q: use go, tinygo or rust", lang)
	}
	if !validProjectName(name) {
		return usageError("init: project name %q: use lower-case letters, digits, '-' and '_', starting with a letter (it names the task, the module and the %s)", name, map[bool]string{true: "crate", false: "Go module"}[lang == "rust"])
	}
	if dir == "" {
		dir = name
	}
	root, found, err := locateSDK(sdk, lang)
	if err != nil {
		return usageError("init: %v", err)
	}
	if err := checkEmptyDir(dir); err != nil {
		return &exitError{code: exitFailure, err: err}
	}
	data := scaffoldData{Lang: lang, Name: name, Crate: strings.ReplaceAll(name, "-", "_"), TinyGo: lang == "tinygo", Rust: lang == "rust"}
	if found {
		data.SDK = filepath.ToSlash(root)
	}
	files, err := scaffold(dir, data)
	if err != nil {
		return failure(err)
	}
	fmt.Fprintf(stdout, "created %s (%s): %s\n", dir, lang, strings.Join(files, " "))
	if found {
		fmt.Fprintf(stdout, "SDK: the wasmstream checkout %s\n", root)
	} else {
		what := "go.mod's replace lines"
		if lang == "rust" {
			what = "Cargo.toml's wasmstream path"
		}
		fmt.Fprintf(stderr, "wasmstream: init: no wasmstream checkout found (--sdk, %s, or the one this binary or the current directory is in): edit %s in %s to point at one before building, or run init again with --sdk PATH\n", sdkEnv, what, dir)
	}
	fmt.Fprintf(stdout, "next: cd %s && make test && make run\n", dir)
	return nil
}

// validProjectName reports whether name suits a task name, a Go module path and a Rust crate.
func validProjectName(name string) bool {
	if name == "" || len(name) > 64 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// checkEmptyDir fails when dir exists and is not an empty directory.
func checkEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("init: %s exists and is not a directory to scaffold into: %w", dir, err)
	case len(entries) > 0:
		return fmt.Errorf("init: directory %s is not empty: init writes only into a new or empty directory; choose another NAME or --dir", dir)
	}
	return nil
}

// locateSDK finds the wasmstream checkout to build against: flag (the checkout, or its
// guest-sdk/go or guest-sdk/rust), else $WASMSTREAM_SDK, else a checkout holding the running
// executable or the current directory. A checkout given explicitly that lacks the SDK is an
// error; found is false when nothing was given and none was found.
func locateSDK(flag, lang string) (root string, found bool, err error) {
	given, from := flag, "--sdk"
	if given == "" {
		given, from = os.Getenv(sdkEnv), sdkEnv
	}
	if given != "" {
		abs, err := filepath.Abs(given)
		if err != nil {
			return "", false, err
		}
		for _, c := range []string{abs, filepath.Dir(filepath.Dir(abs))} {
			if isCheckout(c, lang) {
				return c, true, nil
			}
		}
		return "", false, fmt.Errorf("%s %s: not a wasmstream checkout (no guest-sdk/%s and abi in it): give the directory holding guest-sdk/", from, given, sdkDir(lang))
	}
	var starts []string
	if exe, err := os.Executable(); err == nil {
		if exe, err := filepath.EvalSymlinks(exe); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, d := range starts {
		for {
			if isCheckout(d, lang) {
				return d, true, nil
			}
			up := filepath.Dir(d)
			if up == d {
				break
			}
			d = up
		}
	}
	return "", false, nil
}

func sdkDir(lang string) string {
	if lang == "rust" {
		return "rust"
	}
	return "go"
}

// isCheckout reports whether dir holds the SDK lang needs (and abi, which the Go SDK imports).
func isCheckout(dir, lang string) bool {
	need := []string{"guest-sdk/go/go.mod", "abi/go.mod"}
	if lang == "rust" {
		need = []string{"guest-sdk/rust/Cargo.toml"}
	}
	for _, f := range need {
		if st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f))); err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// scaffold writes the project for data into dir and returns the files' paths in it.
func scaffold(dir string, data scaffoldData) ([]string, error) {
	lang := data.Lang
	if lang == "tinygo" {
		lang = "go"
	}
	var written []string
	for _, f := range append(append([]scaffoldFile{}, scaffoldFiles[lang]...), scaffoldFiles["common"]...) {
		text, err := scaffoldFS.ReadFile("scaffold/" + f.tmpl)
		if err != nil {
			return nil, fmt.Errorf("init: template %s: %w", f.tmpl, err)
		}
		t, err := template.New(f.tmpl).Option("missingkey=error").Parse(string(text))
		if err != nil {
			return nil, fmt.Errorf("init: template %s: %w", f.tmpl, err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("init: template %s: %w", f.tmpl, err)
		}
		path := filepath.Join(dir, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("init: %w", err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			return nil, fmt.Errorf("init: %w", err)
		}
		written = append(written, f.path)
	}
	return written, nil
}
