package modrt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

func TestCompileRefuses(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	driver := fixture(t, "driver")
	corrupt := slices.Clone(fixture(t, "trap"))
	corrupt[len(corrupt)-1] = 0xff // the last function's `end` opcode

	for _, tc := range []struct {
		name     string
		wasm     []byte
		lim      Limits
		problems []string // exact
		prefix   string   // or: the single problem starts with this
		hasCause bool
	}{
		{name: "noabi", problems: []string{"module exports no wasmstream_process"}},
		{name: "badversion", problems: []string{"declares ABI 1.0; this host speaks 0.5"}},
		{name: "badversion06", problems: []string{"declares ABI 0.6; this host speaks 0.5"}},
		{name: "unknownimport", problems: []string{"imports unknown host function wasmstream_v0.frobnicate"}},
		{name: "foreignimport", problems: []string{
			"imports env.something: only wasmstream_v0 and wasi_snapshot_preview1 may be imported"}},
		{name: "bigmem", problems: []string{"memory minimum 2000 pages exceeds the limit of 1024"}},
		{name: "bigmem", lim: Limits{MaxMemoryPages: 1999},
			problems: []string{"memory minimum 2000 pages exceeds the limit of 1999"}},
		{name: "badsig", problems: []string{
			"export memory is a function, not a memory",
			"export wasmstream_alloc has type (i32, i32) -> i32; want (i32) -> i32",
			"export _initialize has type () -> i32; want () -> ()",
			"import wasmstream_v0.state_get has type (i32) -> i32; want (i32, i32, i32, i32, i32, i32) -> i32",
		}},
		{name: "badwasi", problems: []string{
			"imports unknown WASI function wasi_snapshot_preview1.frobnicate",
			"import wasi_snapshot_preview1.fd_write has type (i32) -> i32; want (i32, i32, i32, i32) -> i32",
		}},
		{name: "inittrap", prefix: "_initialize trapped: wasm error: unreachable", hasCause: true},
		{name: "command", problems: []string{notReactor}, prefix: "built as a command, not a reactor (it exports _start and no _initialize", hasCause: true},
		{name: "empty", wasm: []byte{},
			problems: []string{`invalid wasm binary: not a WebAssembly binary (no \0asm magic): ` + buildHint}, hasCause: true},
		{name: "text", wasm: []byte("(module)"),
			problems: []string{`invalid wasm binary: not a WebAssembly binary (no \0asm magic): ` + buildHint}, hasCause: true},
		{name: "elf", wasm: []byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00"),
			problems: []string{`invalid wasm binary: not a WebAssembly binary (no \0asm magic, but an ELF executable or shared library: built for the machine, not for wasm): ` + buildHint}, hasCause: true},
		{name: "version2", wasm: []byte("\x00asm\x02\x00\x00\x00"),
			problems: []string{"invalid wasm binary: unsupported WebAssembly binary version 2"}, hasCause: true},
		{name: "truncated", wasm: driver[:len(driver)/2],
			prefix: "invalid wasm binary: code section at offset 416 runs past the end of the binary (776 bytes declared, 190 left: truncated?)", hasCause: true},
		{name: "truncated-header", wasm: driver[:9], prefix: "invalid wasm binary: type section header: unexpected end of binary", hasCause: true},
		{name: "corrupt", wasm: corrupt, prefix: "invalid wasm binary: ", hasCause: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wasm := tc.wasm
			if wasm == nil {
				wasm = fixture(t, tc.name)
			}
			m, err := r.Compile(context.Background(), wasm, tc.lim)
			if err == nil {
				_ = m.Close(context.Background())
				t.Fatal("compiled; want a refusal")
			}
			var me *ModuleError
			if !errors.As(err, &me) {
				t.Fatalf("error %v (%T) is not a *ModuleError", err, err)
			}
			if tc.problems != nil && !slices.Equal(me.Problems, tc.problems) {
				t.Errorf("problems:\n got %q\nwant %q", me.Problems, tc.problems)
			}
			if tc.prefix != "" && (len(me.Problems) != 1 || !strings.HasPrefix(me.Problems[0], tc.prefix)) {
				t.Errorf("problems %q, want one starting with %q", me.Problems, tc.prefix)
			}
			if (me.Err != nil) != tc.hasCause {
				t.Errorf("cause %v, want one: %v", me.Err, tc.hasCause)
			}
			if want := "module refused: " + me.Reason(); err.Error() != want {
				t.Errorf("message %q, want %q", err.Error(), want)
			}
		})
	}
}

func TestCompileTruncatedEverywhere(t *testing.T) {
	// Every prefix of a valid module is refused with a ModuleError, never a panic, unless it
	// ends at a section boundary after which only optional sections (data) were cut.
	r := newRuntime(t, RuntimeConfig{})
	wasm := fixture(t, "badptr")
	compiled := 0
	for n := 0; n < len(wasm); n++ {
		m, err := r.Compile(context.Background(), wasm[:n], Limits{})
		if err == nil {
			compiled++
			_ = m.Close(context.Background())
			continue
		}
		var me *ModuleError
		if !errors.As(err, &me) {
			t.Fatalf("prefix of %d bytes: %v, want a *ModuleError", n, err)
		}
	}
	if compiled > 1 {
		t.Errorf("%d prefixes compiled, want at most 1 (without the data section)", compiled)
	}
}

func TestCompileBigMemoryWithinLimit(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "bigmem", Limits{MaxMemoryPages: 2000})
	i := instantiate(t, m, InstanceConfig{})
	if _, err := i.Process(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	// A second limit in the same runtime works side by side.
	d := compile(t, r, "driver", Limits{MaxMemoryPages: 4})
	instantiate(t, d, InstanceConfig{})
}

func TestModuleInfo(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	wasm := fixture(t, "driver")
	m := compile(t, r, "driver", Limits{})
	info := m.Info()
	sum := sha256.Sum256(wasm)
	if info.ABIVersion != 1 || info.Size != len(wasm) || info.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("info = %+v", info)
	}
	var wantImports []string
	for _, f := range abi.HostFuncs[:9] { // the driver is a 0.1 guest
		wantImports = append(wantImports, abi.ModuleName+"."+f)
	}
	if !slices.Equal(info.Imports, wantImports) {
		t.Errorf("imports %q, want %q", info.Imports, wantImports)
	}
	wantExports := []string{"memory", "wasmstream_abi_version", "wasmstream_alloc", "wasmstream_init", "wasmstream_process"}
	if !slices.Equal(info.Exports, wantExports) {
		t.Errorf("exports %q, want %q", info.Exports, wantExports)
	}
	info.Imports[0] = "changed"
	if m.Info().Imports[0] == "changed" {
		t.Error("Info shares its slices")
	}
	if got := m.Limits(); !reflect.DeepEqual(got, (Limits{}).withDefaults()) {
		t.Errorf("limits %+v", got)
	}
}

func TestLimitsValidate(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	_, err := r.Compile(context.Background(), fixture(t, "driver"), Limits{MaxMemoryPages: 70000, MaxValueBytes: -1, MaxLogBytes: -2})
	if err == nil {
		t.Fatal("compiled with invalid limits")
	}
	for _, want := range []string{
		"limits: MaxMemoryPages 70000 is over 65536 (4 GiB)",
		"limits: MaxValueBytes is negative (-1)",
		"limits: MaxLogBytes is negative (-2)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestCompileCacheDir(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	for round := 0; round < 2; round++ {
		r, err := NewRuntime(ctx, RuntimeConfig{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		m, err := r.Compile(ctx, fixture(t, "driver"), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		i, err := m.Instantiate(ctx, InstanceConfig{Task: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := i.Process(ctx, []abi.Record{rec("k", nil)}, nil); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) == 0 {
		t.Error("cache directory is empty")
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	r, err := NewRuntime(ctx, RuntimeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Compile(ctx, fixture(t, "driver"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	i, err := m.Instantiate(ctx, InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Instances outlive their Module.
	if _, err := i.Process(ctx, []abi.Record{rec("k", new(prog).put("k", "a", "1").bytes())}, nil); err != nil {
		t.Fatalf("process after Module.Close: %v", err)
	}
	if _, err := m.Instantiate(ctx, InstanceConfig{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Instantiate after Close: %v", err)
	}
	if err := i.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := i.Process(ctx, nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Process after Close: %v", err)
	}
	for k := 0; k < 2; k++ {
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Compile(ctx, fixture(t, "driver"), Limits{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Compile after Close: %v", err)
	}
}

// TestFixturesUpToDate checks the committed .wasm files against their .wat sources when wabt is
// installed.
func TestFixturesUpToDate(t *testing.T) {
	wat2wasm := guestbuild.Tool(t, "wat2wasm")
	wats, _ := filepath.Glob(filepath.Join("testdata", "*.wat"))
	if len(wats) == 0 {
		t.Fatal("no fixtures")
	}
	for _, wat := range wats {
		out := filepath.Join(t.TempDir(), "x.wasm")
		if b, err := exec.Command(wat2wasm, wat, "-o", out).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", wat, err, b)
		}
		got, _ := os.ReadFile(out)
		committed, err := os.ReadFile(strings.TrimSuffix(wat, ".wat") + ".wasm")
		if err != nil || !bytes.Equal(got, committed) {
			t.Errorf("%s: the committed .wasm is stale; run go generate", wat)
		}
	}
}

// The refusals of a module built the wrong way say how to build it right, for each language.
func TestBuildHints(t *testing.T) {
	for _, want := range []string{"-buildmode=c-shared", "GOOS=wasip1 GOARCH=wasm go build", "tinygo build -target=wasip1", "Go:", "TinyGo:"} {
		if !strings.Contains(notReactor, want) {
			t.Errorf("the command-module problem %q does not say %q", notReactor, want)
		}
	}
	for _, want := range []string{"GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared", "tinygo build -target=wasip1 -buildmode=c-shared", "cargo build --release --target wasm32-unknown-unknown"} {
		if !strings.Contains(buildHint, want) {
			t.Errorf("the build hint %q does not say %q", buildHint, want)
		}
	}
}

// TestClone: a clone of a module keeps the compiled code after the original is closed (a task's
// loops each close their handle when a version is replaced); each handle refuses instances once
// it is closed itself.
func TestClone(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, RuntimeConfig{})
	m, err := r.Compile(ctx, fixture(t, "driver"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	c := m.Clone()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Instantiate(ctx, InstanceConfig{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Instantiate after Close: %v", err)
	}
	i, err := c.Instantiate(ctx, InstanceConfig{})
	if err != nil {
		t.Fatalf("Instantiate of the clone after the original's Close: %v", err)
	}
	if _, err := i.Process(ctx, []abi.Record{rec("k", new(prog).put("k", "a", "1").bytes())}, nil); err != nil {
		t.Fatalf("process on the clone's instance: %v", err)
	}
	if err := i.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent: the second Close of the clone releases nothing more
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Instantiate(ctx, InstanceConfig{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Instantiate of the clone after its Close: %v", err)
	}
}
