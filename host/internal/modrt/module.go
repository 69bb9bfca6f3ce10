package modrt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/fuel"
)

// Module is a compiled and validated task module. Instances are made from it with Instantiate.
// A Module is safe for concurrent use.
type Module struct {
	eng      *engine
	compiled wazero.CompiledModule
	info     ModuleInfo
	lim      Limits
	metered  bool // the module was rewritten by package fuel
	start    bool // metered, and its start function is exported as fuel.StartExport

	mu     sync.Mutex
	closed bool

	logLim *logLimiter // the rate limit of the instances' log lines (loglimit.go)

	refused refusalLog // rate-limits the warnings about refused http_requests (http.go)

	http *httpClient // outbound HTTP, shared by the instances; nil without Limits.Grants.HTTP (http.go)

	observer func(fn int, result int64) // tests only, copied into each Instance

	// share counts the handles on compiled (Clone); nil while m is its only one.
	share *moduleShare
}

// moduleShare counts the open handles on one compiled module (Clone).
type moduleShare struct {
	mu   sync.Mutex
	refs int
}

// ModuleInfo describes a compiled module.
type ModuleInfo struct {
	// ABIVersion is what the module's wasmstream_abi_version returned (major << 16 | minor).
	ABIVersion uint32
	// Size is the length of the .wasm binary in bytes.
	Size int
	// SHA256 is the hex SHA-256 of the binary.
	SHA256 string
	// Imports lists every import as "module.name", in binary order.
	Imports []string
	// Exports lists every export name, in binary order.
	Exports []string
	// Metered is true when the module runs fuel-metered (Limits.FuelPerRecord is not NoFuel).
	Metered bool
	// StartupFuel is the fuel the trial instance's start-up spent (start function, _initialize,
	// wasmstream_abi_version; wasmstream_init is not run by Compile): a guide for InitFuel.
	// 0 when not Metered.
	StartupFuel int64
}

// signatures of the guest exports (ABI §3).
var (
	sigVersion    = sig(nil, []byte{valI32})
	sigAlloc      = sig([]byte{valI32}, []byte{valI32})
	sigPayload    = sig([]byte{valI32, valI32}, []byte{valI32})
	sigInitialize = sig(nil, nil)
)

var requiredExports = []struct {
	name string
	typ  funcType
}{
	{abi.ExportABIVersion, sigVersion},
	{abi.ExportAlloc, sigAlloc},
	{abi.ExportInit, sigPayload},
	{abi.ExportProcess, sigPayload},
}

// Compile validates and compiles a task module under lim (zero fields take their defaults).
//
// Everything is checked before a Module is returned, and every refusal is a *ModuleError whose
// Problems name exactly what is wrong:
//
//   - the bytes are a well-formed WebAssembly binary;
//   - the exports of ABI §3 are present with their signatures ("module exports no
//     wasmstream_process", "export wasmstream_alloc has type (i32, i32) -> i32; want (i32) -> i32");
//   - every import from wasmstream_v0 is a host function of ABI §4 with its signature ("imports
//     unknown host function wasmstream_v0.frobnicate"), every import from wasi_snapshot_preview1 is
//     a WASI function, and nothing is imported from any other module;
//   - each memory's declared minimum is within lim.MaxMemoryPages ("memory minimum 2000 pages
//     exceeds the limit of 1024"), and the tables' minimums together within
//     lim.MaxTableElements ("table minimum 50000000 elements exceeds the limit of 100000");
//   - unless lim.FuelPerRecord is NoFuel, the module can be fuel-metered (package fuel rewrites
//     it before it is compiled; "cannot be fuel-metered: … unsupported opcode 0x06");
//   - a trial instance runs its start function and _initialize (if any) without trapping and
//     within lim.InitFuel ("start function stopped: call exceeded its CPU budget of …"), and its
//     wasmstream_abi_version is compatible with this host ("declares ABI 1.0; this host speaks 0.1").
//
// Invalid limits are reported by Limits.Validate's error instead. Compile is safe for concurrent
// use; compiling the same bytes twice shares the compiled code.
func (r *Runtime) Compile(ctx context.Context, wasm []byte, lim Limits) (*Module, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	lim = lim.withDefaults()
	eng, err := r.engine(ctx, lim.MaxMemoryPages)
	if err != nil {
		return nil, err
	}
	shape, code, err := checkModule(wasm, eng, lim)
	if err != nil {
		return nil, err
	}
	var metered fuel.Result
	if lim.metered() {
		if metered, err = meter(code, lim); err != nil {
			return nil, err
		}
		code = metered.Wasm
	}
	// Functions are compiled on every available core: a Go guest's ~2 MB take ~0.5 s on one
	// core, and a deploy waits for them (the code is the same whatever the order). wazero's
	// workers stop when ctx ends, its single-threaded compile does not; a compile is not
	// interrupted either way, so that a host stopped while starting reports its stop, not a
	// module that failed to compile.
	cctx := experimental.WithCompilationWorkers(context.WithoutCancel(ctx), runtime.GOMAXPROCS(0))
	compiled, err := eng.rt.CompileModule(cctx, code)
	if err != nil {
		return nil, moduleErr(err, "invalid wasm binary: "+err.Error())
	}
	sum := sha256.Sum256(wasm)
	m := &Module{
		eng:      eng,
		compiled: compiled,
		lim:      lim,
		metered:  lim.metered(),
		start:    metered.Start,
		http:     newHTTPClient(lim.Grants.HTTP),
		logLim:   newLogLimiter(lim.MaxLogLinesPerSecond, lim.LogBurstLines),
		info:     ModuleInfo{Size: len(wasm), SHA256: hex.EncodeToString(sum[:])},
	}
	for _, im := range shape.imports {
		m.info.Imports = append(m.info.Imports, im.module+"."+im.name)
	}
	for _, ex := range shape.exports {
		m.info.Exports = append(m.info.Exports, ex.name)
	}
	if err := m.trial(ctx, r.logger, shape); err != nil {
		_ = compiled.Close(ctx)
		return nil, err
	}
	return m, nil
}

// checkModule checks wasm before it is compiled (its shape against the ABI, what it declares
// against lim) and returns its shape and its code with the tables limited (fuel.LimitTables).
// Every problem found is reported at once, in a *ModuleError.
func checkModule(wasm []byte, eng *engine, lim Limits) (*wasmShape, []byte, error) {
	shape, err := scanWasm(wasm)
	if err != nil {
		return nil, nil, moduleErr(err, "invalid wasm binary: "+err.Error())
	}
	problems := checkShape(shape, eng, lim)
	decl, err := fuel.Declarations(wasm)
	if err != nil {
		var fe *fuel.Error
		if errors.As(err, &fe) {
			return nil, nil, moduleErr(err, "invalid wasm binary: "+fe.Detail())
		}
		return nil, nil, moduleErr(err, "invalid wasm binary: "+err.Error())
	}
	problems = append(problems, checkDeclared(decl, lim)...)
	code, err := fuel.LimitTables(wasm, lim.MaxTableElements)
	var tme *fuel.TableMinimumError
	switch {
	case errors.As(err, &tme):
		problems = append(problems, tme.Error())
	case errors.As(err, new(*fuel.Error)):
		return nil, nil, moduleErr(err, "invalid wasm binary: "+err.(*fuel.Error).Detail())
	case err != nil:
		return nil, nil, moduleErr(err, "invalid wasm binary: "+err.Error())
	}
	if len(problems) > 0 {
		return nil, nil, moduleErr(nil, problems...)
	}
	return shape, code, nil
}

// meter makes code meter its own execution (fuel.Instrument) with lim's start-up budget and call
// depth.
func meter(code []byte, lim Limits) (fuel.Result, error) {
	metered, err := fuel.Instrument(code, fuel.Options{Initial: lim.InitFuel, Stack: int32(min(lim.MaxCallDepth, math.MaxInt32))})
	if err != nil {
		var fe *fuel.Error
		switch {
		case errors.As(err, &fe) && fe.Unsupported:
			return metered, moduleErr(err, "cannot be fuel-metered: "+fe.Detail())
		case errors.As(err, &fe):
			return metered, moduleErr(err, "invalid wasm binary: "+fe.Detail())
		}
		return metered, moduleErr(err, "invalid wasm binary: "+err.Error())
	}
	return metered, nil
}

// trial runs a trial instance of m (start-up must work and declare a compatible ABI version) and
// completes m's ModuleInfo from it. A failure is a *ModuleError.
func (m *Module) trial(ctx context.Context, logger *slog.Logger, shape *wasmShape) error {
	trial, err := m.newInstance(ctx, InstanceConfig{Task: "(compile)", Logger: logger})
	if err != nil {
		var me *ModuleError
		if errors.As(err, &me) {
			return me
		}
		var ce *CallError
		if errors.As(err, &ce) && ce.Trap && builtAsCommand(shape) {
			return moduleErr(err, notReactor)
		}
		if errors.As(err, &ce) {
			verb := "trapped"
			if errors.Is(ce.Err, ErrFuelExhausted) {
				verb = "stopped"
			}
			return moduleErr(err, fmt.Sprintf("%s %s: %v", ce.Func, verb, ce.Err))
		}
		return moduleErr(err, "cannot be instantiated: "+err.Error())
	}
	m.info.ABIVersion = trial.abiVers
	m.info.Metered = m.metered
	m.info.StartupFuel = trial.spent
	_ = trial.Close(ctx)
	return nil
}

// notReactor is the problem of a module whose start-up trapped and that was built as a WASI
// command: a Go module built without -buildmode=c-shared traps in runtime.notInitialized at its
// first export call, since only _start would initialize its runtime.
const notReactor = "built as a command, not a reactor (it exports _start and no _initialize, and trapped at start-up): " +
	"build it with -buildmode=c-shared (Go: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared; " +
	"TinyGo: tinygo build -target=wasip1 -buildmode=c-shared -scheduler=none)"

// builtAsCommand reports whether a module exports a WASI command's _start and no reactor's
// _initialize.
func builtAsCommand(s *wasmShape) bool {
	var start, initialize bool
	for _, ex := range s.exports {
		start = start || ex.name == "_start" && ex.kind == kindFunc
		initialize = initialize || ex.name == "_initialize"
	}
	return start && !initialize
}

// checkShape checks exports, imports and memory minimums against the ABI.
func checkShape(s *wasmShape, eng *engine, lim Limits) []string {
	var problems []string
	if len(s.exports) > MaxExports {
		problems = append(problems, fmt.Sprintf("has %d exports, over the limit of %d", len(s.exports), MaxExports))
	} else {
		problems = checkExports(s)
	}
	if len(s.imports) > MaxImports {
		problems = append(problems, fmt.Sprintf("has %d imports, over the limit of %d", len(s.imports), MaxImports))
	} else {
		problems = append(problems, checkImports(s, eng)...)
	}
	for _, min := range s.memMins {
		if min > uint64(lim.MaxMemoryPages) {
			problems = append(problems, fmt.Sprintf("memory minimum %d pages exceeds the limit of %d", min, lim.MaxMemoryPages))
		}
	}
	return problems
}

// checkExports checks the memory and the function exports of ABI §3: present when required,
// with their signatures.
func checkExports(s *wasmShape) []string {
	var problems []string
	exports := make(map[string]*wasmExport, len(s.exports))
	for k := range s.exports {
		exports[s.exports[k].name] = &s.exports[k]
	}
	checkFunc := func(name string, want funcType, required bool) {
		ex := exports[name]
		switch {
		case ex == nil:
			if required {
				problems = append(problems, "module exports no "+name)
			}
		case ex.kind != kindFunc:
			problems = append(problems, fmt.Sprintf("export %s is a %s, not a function", name, kindName(ex.kind)))
		case ex.typ != want:
			problems = append(problems, fmt.Sprintf("export %s has type %s; want %s", name, ex.typ, want))
		}
	}
	switch ex := exports[abi.ExportMemory]; {
	case ex == nil:
		problems = append(problems, "module exports no "+abi.ExportMemory)
	case ex.kind != kindMemory:
		problems = append(problems, fmt.Sprintf("export %s is a %s, not a memory", abi.ExportMemory, kindName(ex.kind)))
	}
	for _, re := range requiredExports {
		checkFunc(re.name, re.typ, true)
	}
	checkFunc(abi.ExportInitialize, sigInitialize, false)
	// The optional 0.2 exports (a 0.1 guest's are ignored, but a wrong signature is refused
	// whatever the version: it can only be a mistake).
	checkFunc(abi.ExportOnTimer, sigPayload, false)
	checkFunc(abi.ExportOnTick, sigPayload, false)
	checkFunc(abi.ExportMigrate, sigPayload, false)
	checkFunc(abi.ExportStateVersion, sigVersion, false)
	return problems
}

// checkImports checks that every import is a host function of ABI §4 or a WASI function, with
// its signature.
func checkImports(s *wasmShape, eng *engine) []string {
	var problems []string
	for _, im := range s.imports {
		full := im.module + "." + im.name
		var (
			want  funcType
			known bool
			what  string
		)
		switch im.module {
		case abi.ModuleName:
			what = "host function"
			if h := hostFuncByName[im.name]; h != nil {
				want, known = sig(h.params, h.results), true
			}
		case wasiModuleName:
			what = "WASI function"
			want, known = eng.wasi[im.name]
		default:
			problems = append(problems, fmt.Sprintf("imports %s: only %s and %s may be imported", full, abi.ModuleName, wasiModuleName))
			continue
		}
		switch {
		case im.kind != kindFunc:
			problems = append(problems, fmt.Sprintf("imports %s %s; %s provides only functions", kindName(im.kind), full, im.module))
		case !known:
			problems = append(problems, fmt.Sprintf("imports unknown %s %s", what, full))
		case im.typ != want:
			problems = append(problems, fmt.Sprintf("import %s has type %s; want %s", full, im.typ, want))
		}
	}
	return problems
}

// checkDeclared checks what the module declares against the limits on compile time and memory.
func checkDeclared(d fuel.Declared, lim Limits) []string {
	var problems []string
	if d.Functions > lim.MaxFunctions {
		problems = append(problems, fmt.Sprintf("defines %d functions, over the limit of %d (max_functions)", d.Functions, lim.MaxFunctions))
	}
	if d.Locals > uint64(lim.MaxLocals) {
		problems = append(problems, fmt.Sprintf("declares %d locals (%d in one function), over the limit of %d (max_locals)",
			d.Locals, d.MaxFuncLocals, lim.MaxLocals))
	}
	if d.MaxDepth > lim.MaxNestingDepth {
		problems = append(problems, fmt.Sprintf("nests blocks %d deep, over the limit of %d (max_nesting_depth)", d.MaxDepth, lim.MaxNestingDepth))
	}
	if d.MaxLoopDepth > lim.MaxLoopDepth {
		problems = append(problems, fmt.Sprintf("nests loops %d deep, over the limit of %d (max_loop_depth)", d.MaxLoopDepth, lim.MaxLoopDepth))
	}
	if d.DepthSum > uint64(lim.MaxNestingWork) {
		problems = append(problems, fmt.Sprintf("has a nesting work (every instruction's nesting depth, summed) of %d, over the limit of %d (max_nesting_work)",
			d.DepthSum, lim.MaxNestingWork))
	}
	if d.MaxFuncBytes > lim.MaxFunctionBytes {
		problems = append(problems, fmt.Sprintf("has a function of %d bytes, over the limit of %d (max_function_bytes)", d.MaxFuncBytes, lim.MaxFunctionBytes))
	}
	if d.ElemEntries > uint64(lim.MaxTableElements) {
		problems = append(problems, fmt.Sprintf("has element segments of %d elements together, over the limit of %d (max_table_elements)",
			d.ElemEntries, lim.MaxTableElements))
	}
	if d.BlockWork > uint64(lim.MaxBlockWork) {
		problems = append(problems, fmt.Sprintf("has a block work (every function's blocks and branches, squared and summed; %d in one function) of %d, over the limit of %d (max_block_work)",
			d.MaxBlocks, d.BlockWork, lim.MaxBlockWork))
	}
	return problems
}

// Info describes the module. The returned slices are copies.
func (m *Module) Info() ModuleInfo {
	info := m.info
	info.Imports = append([]string(nil), info.Imports...)
	info.Exports = append([]string(nil), info.Exports...)
	return info
}

// Limits returns the limits the module was compiled with, defaults applied.
func (m *Module) Limits() Limits { return m.lim }

func (m *Module) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// Clone returns another handle on m's compiled code, its outbound HTTP client and its log rate
// limit, which Close closes on its own: the compiled code is released once every handle is
// closed. The loops of one task (host: TaskConfig.Loops) each take a handle, since a task closes
// the module of a version it replaced. m must not be closed.
func (m *Module) Clone() *Module {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.share == nil {
		m.share = &moduleShare{refs: 1}
	}
	m.share.mu.Lock()
	m.share.refs++
	m.share.mu.Unlock()
	return &Module{eng: m.eng, compiled: m.compiled, info: m.info, lim: m.lim, metered: m.metered, start: m.start,
		logLim: m.logLim, http: m.http, observer: m.observer, share: m.share}
}

// Close releases the compiled code once no Instance uses it; Instances already made keep working
// until they are closed. Instantiate then returns ErrClosed. Close is idempotent. Of a module
// with clones (Clone), the last handle closed releases the code.
func (m *Module) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	share := m.share
	m.mu.Unlock()
	if share != nil {
		share.mu.Lock()
		share.refs--
		last := share.refs == 0
		share.mu.Unlock()
		if !last {
			return nil
		}
	}
	m.http.close()
	if err := m.compiled.Close(ctx); err != nil {
		return fmt.Errorf("close module: %w", err)
	}
	return nil
}

// newerImports names the imports of wasmstream_v0 functions added after the minor version v
// declares (ABI.md §2: a 0.1 guest may not import a 0.2 function).
func (m *Module) newerImports(v uint32) []string {
	var problems []string
	for _, im := range m.info.Imports {
		name, ok := strings.CutPrefix(im, abi.ModuleName+".")
		if !ok {
			continue
		}
		if minor, ok := abi.FuncMinor[name]; ok && minor > v&0xffff {
			problems = append(problems, fmt.Sprintf("imports %s, added in ABI 0.%d, but declares ABI %s", im, minor, abi.VersionString(v)))
		}
	}
	return problems
}
