package modrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/fuel"
)

// wasiModuleName is the WASI import module a guest may use (ABI §7).
const wasiModuleName = wasi_snapshot_preview1.ModuleName

// RuntimeConfig configures a Runtime. The zero value is valid.
type RuntimeConfig struct {
	// CacheDir is a directory for the on-disk compilation cache, created if missing. A module
	// compiled once is then loaded from it by later processes (about 20× faster for a standard Go
	// guest). Entries are keyed by the module's bytes and the wazero version. "" (the default)
	// means no disk cache.
	CacheDir string
	// Logger receives the runtime's own messages and the output of trial instances made by
	// Compile. nil discards them.
	Logger *slog.Logger

	// closeOnContextDone turns on wazero's interruption of a running guest when the call's
	// context is done. Benchmarks only: it is what fuel metering is measured against.
	closeOnContextDone bool
}

// Runtime compiles modules and holds what their instances share: the compiled code, the WASI
// host module and the wasmstream_v0 host module. It is safe for concurrent use.
//
// Internally a wazero runtime carries the memory limit, so the Runtime keeps one wazero runtime
// per distinct Limits.MaxMemoryPages it has seen (in practice one), all sharing one compilation
// engine and cache.
type Runtime struct {
	cache     wazero.CompilationCache
	logger    *slog.Logger
	interrupt bool // RuntimeConfig.closeOnContextDone

	mu      sync.Mutex
	closed  bool
	engines map[uint32]*engine // by memory limit in pages

	// memory is the size in bytes of the linear memories not freed yet (linmem.go).
	memory atomic.Int64
	// interrupted is set by Interrupt: metered calls stop at the end of their slice.
	interrupted atomic.Bool
}

// Interrupt makes every metered guest call in progress, and every later one, stop at the end
// of its current time slice (within a few milliseconds of guest work) with a *CallError whose
// Err is ErrInterrupted. The host calls it when it must stop without waiting for the calls in
// flight to finish. It cannot be undone.
func (r *Runtime) Interrupt() { r.interrupted.Store(true) }

// Memory returns the size in bytes of the instances' linear memories that are not freed yet:
// those of the instances not closed (tests and diagnostics).
func (r *Runtime) Memory() int64 { return r.memory.Load() }

// engine is one wazero runtime with its host modules instantiated.
type engine struct {
	rt          wazero.Runtime
	interrupted *atomic.Bool  // Runtime.interrupted
	memory      *atomic.Int64 // Runtime.memory
	maxPages    uint32
	wasi        map[string]funcType // WASI functions the guest may import, with their signatures
}

// NewRuntime creates a Runtime. It starts no goroutine.
func NewRuntime(ctx context.Context, cfg RuntimeConfig) (*Runtime, error) {
	var (
		cache wazero.CompilationCache
		err   error
	)
	if cfg.CacheDir != "" {
		if cache, err = wazero.NewCompilationCacheWithDir(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("compilation cache: %w", err)
		}
	} else {
		// In memory only: lets the per-limit wazero runtimes share compiled code.
		cache = wazero.NewCompilationCache()
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{cache: cache, logger: logger, interrupt: cfg.closeOnContextDone, engines: map[uint32]*engine{}}
	// Create the engine for the default limit now, so a broken environment fails here.
	if _, err := r.engine(ctx, DefaultMaxMemoryPages); err != nil {
		_ = r.Close(ctx)
		return nil, err
	}
	return r, nil
}

// engine returns the wazero runtime for a memory limit, creating it on first use.
func (r *Runtime) engine(ctx context.Context, pages uint32) (*engine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	if e := r.engines[pages]; e != nil {
		return e, nil
	}
	// wazero picks its compiler on amd64 and arm64, its interpreter elsewhere.
	rc := wazero.NewRuntimeConfig().
		WithCompilationCache(r.cache).
		WithMemoryLimitPages(pages).
		WithCloseOnContextDone(r.interrupt) // off but in benchmarks: it makes guest loops ~33× slower (DESIGN S21)
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if err := instantiateWASI(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("instantiate WASI: %w", err)
	}
	if err := instantiateHostModule(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("instantiate %s: %w", abi.ModuleName, err)
	}
	if err := instantiateSliceModule(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("instantiate %s: %w", fuel.SliceModule, err)
	}
	e := &engine{rt: rt, interrupted: &r.interrupted, memory: &r.memory, maxPages: pages, wasi: map[string]funcType{}}
	for name, def := range rt.Module(wasiModuleName).ExportedFunctionDefinitions() {
		e.wasi[name] = sigOf(def.ParamTypes(), def.ResultTypes())
	}
	r.engines[pages] = e
	return e, nil
}

// Close releases every wazero runtime and the cache; Modules and Instances made by r stop
// working. Close is idempotent.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	engines := r.engines
	r.engines = nil
	r.mu.Unlock()
	var errs []error
	for _, e := range engines {
		errs = append(errs, e.rt.Close(ctx))
	}
	errs = append(errs, r.cache.Close(ctx))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close runtime: %w", err)
	}
	return nil
}
