//go:build !wasip1

package wasmstream

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A task module outside this repository builds, tests and compiles to wasm with the go.mod the
// README's "Using the SDK from your own module" shows, offline (GOPROXY=off): replace lines for
// both the SDK and abi, no go.sum. Without the abi line it fails, as the README says.
func TestOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module with the go command")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Using the SDK from your own module")
	if !ok {
		t.Fatal(`README.md has no "Using the SDK from your own module" section`)
	}
	_, block, _ := strings.Cut(section, "```\n")
	gomod, _, ok := strings.Cut(block, "```")
	if !ok || !strings.Contains(gomod, "module example.com/mytask") {
		t.Fatalf("no go.mod block in the README section:\n%s", block)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	gomod = strings.ReplaceAll(gomod, "/path/to/wasmstream", filepath.ToSlash(root))

	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", gomod)
	write("main.go", outsideMain)
	write("main_test.go", outsideTest)

	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goCmd); err != nil {
		goCmd = "go"
	}
	run := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(goCmd, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(nil, "test", "-count=1", "./..."); err != nil {
		t.Fatalf("go test in a module outside the repository: %v\n%s\ngo.mod:\n%s", err, out, gomod)
	}
	if out, err := run([]string{"GOOS=wasip1", "GOARCH=wasm"}, "build", "-buildmode=c-shared", "-o", "task.wasm", "."); err != nil {
		t.Fatalf("wasm build: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "task.wasm")); err != nil || !bytes.HasPrefix(b, []byte("\x00asm")) {
		t.Fatalf("task.wasm: %v", err)
	}
	if out, err := run(nil, "mod", "tidy"); err != nil {
		t.Fatalf("go mod tidy: %v\n%s", err, out)
	}
	tidied, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
	if !strings.Contains(string(tidied), "guest-sdk/go =>") || !strings.Contains(string(tidied), "abi =>") {
		t.Fatalf("go mod tidy dropped a replace line:\n%s", tidied)
	}

	// Without the abi replace line the build fails naming abi (the error users met).
	var kept []string
	for _, line := range strings.Split(gomod, "\n") {
		if !strings.Contains(line, "wasmstream/abi =>") {
			kept = append(kept, line)
		}
	}
	write("go.mod", strings.Join(kept, "\n"))
	out, err := run(nil, "build", "./...")
	if err == nil || !strings.Contains(out, "github.com/wasmstream/wasmstream/abi") {
		t.Fatalf("build without the abi replace: %v\n%s", err, out)
	}
}

const outsideMain = `package main

import wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"

func main() {}

var seen = wasmstream.Counter{Name: "seen"}

func init() {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		o, err := wasmstream.ParseJSONObject(r.Value())
		if err != nil {
			return err
		}
		card, _ := o.String("card")
		n, err := seen.Add(r.State(), 1)
		if err != nil {
			return err
		}
		var w wasmstream.JSONWriter
		w.String("card", card).Int("seen", n)
		return wasmstream.Emit("out", r.Key(), w.Bytes())
	})
}
`

const outsideTest = `package main

import (
	"testing"

	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

func TestSeen(t *testing.T) {
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	in := wasmstreamtest.Input{Key: []byte("u"), Value: []byte(` + "`" + `{"card":"c-17","amount":1}` + "`" + `), Timestamp: 9}
	res, err := h.Process(in, in)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Values("out"); len(got) != 2 || got[1] != ` + "`" + `{"card":"c-17","seen":2}` + "`" + ` {
		t.Fatalf("outputs %q", got)
	}
	if res.Named("out")[0].Timestamp != 9 {
		t.Fatalf("timestamp %d", res.Named("out")[0].Timestamp)
	}
	if n, err := seen.Get(h.Read("u")); n != 2 || err != nil {
		t.Fatalf("seen %d, %v", n, err)
	}
}
`
