package modrt

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

var goguest struct {
	once sync.Once
	dir  string
	wasm []byte
	err  error
	out  []byte
}

func TestMain(m *testing.M) {
	code := m.Run()
	if goguest.dir != "" {
		_ = os.RemoveAll(goguest.dir)
	}
	os.Exit(code)
}

// goguestWasm builds testdata/goguest, a standard Go wasip1 guest, once per test process. The test
// is skipped under -short or when the Go toolchain cannot build it.
func goguestWasm(t testing.TB) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a Go guest; skipped with -short")
	}
	goguest.once.Do(func() {
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			if goBin, goguest.err = exec.LookPath("go"); goguest.err != nil {
				return
			}
		}
		if goguest.dir, goguest.err = os.MkdirTemp("", "modrt-goguest"); goguest.err != nil {
			return
		}
		out := filepath.Join(goguest.dir, "goguest.wasm")
		cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", out, ".")
		cmd.Dir = filepath.Join("testdata", "goguest")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "GOFLAGS=")
		if goguest.out, goguest.err = cmd.CombinedOutput(); goguest.err != nil {
			return
		}
		goguest.wasm, goguest.err = os.ReadFile(out)
	})
	if goguest.err != nil {
		t.Fatalf("cannot build the Go guest: %v\n%s", goguest.err, goguest.out)
	}
	return goguest.wasm
}

// TestGoGuest runs a real standard-Go guest (reactor with _initialize, WASI imports, a Go heap)
// end to end.
func TestGoGuest(t *testing.T) {
	wasm := goguestWasm(t)
	r := newRuntime(t, RuntimeConfig{})
	m, err := r.Compile(ctx, wasm, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if info := m.Info(); info.ABIVersion != abi.Version || !slices.Contains(info.Exports, abi.ExportInitialize) {
		t.Errorf("info %+v", info)
	}
	i := instantiate(t, m, InstanceConfig{})
	env := newEnv(map[string]map[string]string{"a": {"n": "\x05\x00\x00\x00"}})
	recs := []abi.Record{rec("a", []byte("v1")), rec("b", []byte("v2")), rec("a", []byte("v3"))}
	recs[0].Timestamp = 10
	for round := 0; round < 3; round++ {
		eff, err := i.Process(ctx, recs, env)
		if err != nil {
			t.Fatal(err)
		}
		// a: 5 → 6 → 7 (the overlay carries the count within the call); b: 0 → 1.
		want := "{out \"a\"=\"v1\" ts=10 \"count\":\"\\x06\\x00\\x00\\x00\"}" +
			"{out \"b\"=\"v2\" ts=1234 \"count\":\"\\x01\\x00\\x00\\x00\"}" +
			"{out \"a\"=\"v3\" ts=1234 \"count\":\"\\a\\x00\\x00\\x00\"}"
		if got := fmtOutputs(eff.Outputs); got != want {
			t.Errorf("outputs\n got %s\nwant %s", got, want)
		}
		if len(eff.Writes) != 3 {
			t.Errorf("writes %+v", eff.Writes)
		}
	}
}
