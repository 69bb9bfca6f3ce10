package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/store"
)

// ModuleReport describes a task's module as the host validated it.
type ModuleReport struct {
	Task       string
	Path       string
	Size       int
	SHA256     string
	ABIVersion string   // "major.minor"
	Imports    []string // "module.name"
	Exports    []string
	// FuelPerRecord is the CPU budget per record the module runs under (the task's
	// fuel_per_record with its default applied); -1 when the CPU bound is disabled.
	FuelPerRecord int64
	// StartupFuel is the fuel the module's start-up (start function, _initialize) spent when
	// Check ran it; 0 when the CPU bound is disabled.
	StartupFuel int64
	// Grants lists the capabilities the configuration grants the module beyond the default
	// of none, one line each ("dir <host> -> <guest> (read-only)", "env NAME", "real clock",
	// "random", "http <hosts> (timeout …, … at once, …)" with the defaults applied); empty when
	// none.
	Grants []string
	// Notes point out where the module and its grants do not match (grantNotes): it imports
	// http_request without grants.http (every request fails with ERR_NOT_ALLOWED), grants.http is
	// set but the module never makes a request, or it imports WASI path_* calls without
	// grants.dirs; and what makes a module needlessly slow: built with TinyGo's default scheduler
	// (asyncify). Empty when none. Deploys and starts log the same notes at warn.
	Notes []string
}

// Check validates cfg, then compiles and validates every task's module without running
// anything. It returns a report per valid module. A configuration problem is returned as the
// joined *ConfigError values of Validate; module problems are joined *TaskError values.
func Check(ctx context.Context, cfg Config) ([]ModuleReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	rt, err := modrt.NewRuntime(ctx, modrt.RuntimeConfig{CacheDir: cacheDir(cfg), Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("wasmstream: %w", err)
	}
	defer rt.Close(ctx)
	var reports []ModuleReport
	var errs []error
	for _, tc := range cfg.Tasks {
		mod, err := compile(ctx, rt, tc)
		if err != nil {
			errs = append(errs, &TaskError{Task: tc.Name, Err: err})
			continue
		}
		info := mod.Info()
		fuel := mod.Limits().FuelPerRecord
		reports = append(reports, ModuleReport{
			Task: tc.Name, Path: tc.Module, Size: info.Size, SHA256: info.SHA256,
			ABIVersion: abi.VersionString(info.ABIVersion), Imports: info.Imports, Exports: info.Exports,
			FuelPerRecord: fuel, StartupFuel: info.StartupFuel, Grants: mod.Limits().Grants.Describe(),
			Notes: append(grantNotes(tc, info.Imports), moduleNotes(info.Exports)...),
		})
		mod.Close(ctx)
	}
	return reports, errors.Join(errs...)
}

// StateEntry is one state value: state[Key][Name] of a task's stream.
type StateEntry struct {
	Stream string // the stream the state belongs to, e.g. "file:input0/0"
	Key    []byte
	Name   []byte
	Value  []byte
}

// StateReader reads the state of a stopped host's data directory.
type StateReader struct {
	db *store.DB
}

// OpenState opens dataDir's store read-only. It fails with a clear error if a running host
// holds it, and with ErrNoState if there is no store.
func OpenState(dataDir string) (*StateReader, error) {
	dir := filepath.Join(dataDir, "state")
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(store.OuterMarker(dir)); err != nil {
			return nil, fmt.Errorf("%w: %s", ErrNoState, dataDir)
		}
		// The store had data and its directory is gone: store.Open says so.
	}
	db, err := store.Open(dir, store.Options{ReadOnly: true})
	if errors.Is(err, store.ErrLocked) {
		return nil, fmt.Errorf("wasmstream: the state store %s is in use by a running host: stop the host first (state reads only a stopped host's store): %w", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("wasmstream: %w", err)
	}
	return &StateReader{db: db}, nil
}

// ResetState moves dataDir's state store aside, to state.damaged-<UTC time> next to it, so
// that the next Run starts with an empty store and reprocesses its inputs from the start. It
// deletes nothing. It returns where the store went, or "" if there was none. A running host
// holds the store: ResetState then fails.
//
// The marker beside the store (store.OuterMarker) goes with it, to the same name plus
// ".STORE-ID"; when only that marker is left (the store's directory was deleted), it alone is
// moved aside and ResetState returns where it went.
func ResetState(dataDir string) (string, error) {
	dir := filepath.Join(dataDir, "state")
	aside := dir + ".damaged-" + time.Now().UTC().Format("20060102T150405Z")
	outer := store.OuterMarker(dir)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(outer); err != nil {
			return "", nil
		}
		if err := os.Rename(outer, store.OuterMarker(aside)); err != nil {
			return "", fmt.Errorf("wasmstream: reset state: %w", err)
		}
		return store.OuterMarker(aside), nil
	}
	// Make sure no host uses it: a read-write open would take the lock, but also judge the
	// store; the lock alone is what matters here.
	if err := store.CheckUnlocked(dir); err != nil {
		return "", fmt.Errorf("wasmstream: reset state: %w", err)
	}
	if err := os.Rename(dir, aside); err != nil {
		return "", fmt.Errorf("wasmstream: reset state: %w", err)
	}
	if err := os.Rename(outer, store.OuterMarker(aside)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("wasmstream: reset state: the store was moved to %s, but its marker %s was not: %w", aside, outer, err)
	}
	return aside, nil
}

// Tasks lists the tasks that have state.
func (r *StateReader) Tasks() ([]string, error) { return r.db.Tasks() }

// Scan calls fn for every entry of task whose key starts with keyPrefix (all keys when empty),
// stream by stream in store order — shorter keys first, then keys and names bytewise — until fn
// returns false. With exact set, only the
// key equal to keyPrefix. The entry's slices are valid only during the call.
func (r *StateReader) Scan(task string, keyPrefix []byte, exact bool, fn func(StateEntry) bool) error {
	streams, err := r.db.Streams(task)
	if err != nil {
		return err
	}
	for _, st := range streams {
		more := true
		err := r.db.ScanKeys(task, st.ID, keyPrefix, func(key, name, val []byte) bool {
			if exact && string(key) != string(keyPrefix) {
				return true
			}
			more = fn(StateEntry{Stream: st.Name, Key: key, Name: name, Value: val})
			return more
		})
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
	return nil
}

// Close releases the store.
func (r *StateReader) Close() error { return r.db.Close() }

// grantNotes lists the mismatches between a task's grants and its module's imports. They are
// warnings, never refusals: a module may call a capability only on some path (HTTP for an
// optional enrichment), and the sandbox answers an ungranted call with an error the guest
// handles. Only imports that show intent are noted: http_request, and WASI's path_* functions
// (opening or naming files), which Go, TinyGo and wasi-libc link only when the program uses
// files. The clock, random, environment and fd_* imports are not noted: every Go or TinyGo
// module imports them for its runtime, and the sandbox answers them (a fake clock, a
// deterministic random source, an empty environment) whether granted or not.
func grantNotes(tc TaskConfig, imports []string) []string {
	var notes []string
	http := slices.Contains(imports, abi.ModuleName+"."+abi.FuncHTTPRequest)
	switch granted := len(tc.Grants.HTTP.Allow) > 0; {
	case http && !granted:
		notes = append(notes, "imports "+abi.FuncHTTPRequest+" but grants.http is not set: every request fails with ERR_NOT_ALLOWED")
	case granted && !http:
		notes = append(notes, "grants.http is set but the module does not import "+abi.FuncHTTPRequest)
	}
	if len(tc.Grants.Dirs) == 0 {
		for _, imp := range imports {
			if name, ok := strings.CutPrefix(imp, "wasi_snapshot_preview1."); ok && strings.HasPrefix(name, "path_") {
				notes = append(notes, "imports "+imp+" but grants.dirs is empty: the module sees no files, every file it opens is missing")
				break
			}
		}
	}
	return notes
}

// warnNotes logs the notes of grantNotes and moduleNotes for tc's module mod at warn, with
// attrs, and returns them.
func warnNotes(log *slog.Logger, tc TaskConfig, mod *modrt.Module, attrs ...any) []string {
	info := mod.Info()
	notes := append(grantNotes(tc, info.Imports), moduleNotes(info.Exports)...)
	for _, n := range notes {
		log.Warn(n, attrs...)
	}
	return notes
}

// asyncifyNote is the note on a module transformed by Binaryen's asyncify pass, which TinyGo's
// default scheduler needs: every call then unwinds and rewinds through it (measured with the
// wordcount example: ~1.1 ms and ~17 million fuel units a call instead of ~4 µs and ~20 thousand).
const asyncifyNote = "the module exports asyncify_start_unwind: built with TinyGo's default scheduler, every call costs about a millisecond and millions of fuel units; rebuild with tinygo build -scheduler=none"

// moduleNotes lists what makes a module needlessly slow without making it wrong.
func moduleNotes(exports []string) []string {
	if slices.Contains(exports, "asyncify_start_unwind") {
		return []string{asyncifyNote}
	}
	return nil
}
