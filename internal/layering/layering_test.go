package layering

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Standard   bool
}

// list runs `go list -json` in dir with extra environment and returns the packages.
func list(t *testing.T, dir string, env []string, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return pkgs
}

const mod = "github.com/wasmstream/wasmstream"

// allowedOnlyIn says which of our packages may import a third-party module directly.
var allowedOnlyIn = map[string][]string{
	"github.com/tetratelabs/wazero": {mod + "/host/internal/modrt"},
	"github.com/dgraph-io/badger":   {mod + "/store"},
	"github.com/twmb/franz-go":      {mod + "/host/internal/kafka"},
	"github.com/spf13/viper":        {mod + "/cmd/wasmstream"},
	"github.com/spf13/cobra":        {mod + "/cmd/wasmstream"},
	"github.com/prometheus":         {mod + "/cmd/wasmstream"},
}

// forbidden lists, for a package prefix, module packages it must not import.
var forbidden = []struct{ pkg, must string }{
	{mod + "/store", mod + "/host"},
	{mod + "/store", mod + "/cmd"},
	{mod + "/host", mod + "/cmd"},
	{mod + "/cmd/wasmstream", mod + "/host/internal"},
	{mod + "/cmd/wasmstream", mod + "/store"},
	{mod + "/host/internal/sched", mod + "/"},
	{mod + "/host/internal/positions", mod + "/"},
	{mod + "/host/internal/fuel", mod + "/"},  // bytes in, bytes out: standard library only
	{mod + "/host/internal/hist", mod + "/"},  // standard library only
	{mod + "/internal/scripttest", mod + "/"}, // the golden-script harness: standard library only
	{mod + "/", mod + "/internal/scripttest"}, // …and only tests may use it
}

func TestDependencyDirection(t *testing.T) {
	for _, p := range list(t, guestbuild.Root(), nil, "./...") {
		for _, imp := range p.Imports {
			for third, owners := range allowedOnlyIn {
				if strings.HasPrefix(imp, third) && !contains(owners, p.ImportPath) {
					t.Errorf("%s imports %s; only %v may", p.ImportPath, imp, owners)
				}
			}
			for _, f := range forbidden {
				if strings.HasPrefix(p.ImportPath, f.pkg) && strings.HasPrefix(imp, f.must) && !strings.HasSuffix(p.ImportPath, "_test") {
					t.Errorf("%s imports %s: the design forbids %s → %s", p.ImportPath, imp, f.pkg, f.must)
				}
			}
		}
	}
}

// The abi module is a leaf: standard library only.
func TestABIStandardLibraryOnly(t *testing.T) {
	for _, p := range list(t, filepath.Join(guestbuild.Root(), "abi"), nil, "-deps", "./...") {
		if !p.Standard && !strings.HasPrefix(p.ImportPath, mod+"/abi") {
			t.Errorf("abi depends on %s", p.ImportPath)
		}
	}
}

// A guest built with the Go SDK links nothing of the host side.
func TestGuestLinksNoHostDependency(t *testing.T) {
	env := []string{"GOOS=wasip1", "GOARCH=wasm"}
	for _, p := range list(t, filepath.Join(guestbuild.Root(), "examples", "wasm"), env, "-deps", "./...") {
		if p.Standard {
			continue
		}
		ok := strings.HasPrefix(p.ImportPath, mod+"/abi") || strings.HasPrefix(p.ImportPath, mod+"/guest-sdk/go") ||
			strings.HasPrefix(p.ImportPath, mod+"/examples/wasm")
		if !ok {
			t.Errorf("a guest build depends on %s", p.ImportPath)
		}
	}
	// And the SDK's module requires nothing but abi, so building a guest downloads nothing else.
	b, err := os.ReadFile(filepath.Join(guestbuild.Root(), "guest-sdk", "go", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.Contains(f[0], ".") && !strings.HasPrefix(f[0], mod) && f[0] != "module" {
			t.Errorf("guest-sdk/go requires %s", f[0])
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
