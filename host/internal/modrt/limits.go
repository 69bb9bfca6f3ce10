package modrt

import (
	"errors"
	"fmt"

	"github.com/wasmstream/wasmstream/store"
)

// MaxExports and MaxImports bound a module's exports and imports, not configurable: a module
// has a few dozen (a Go guest about 10 exports and 20 imports), and the runtime spends time and
// memory on each when it compiles the module and again in every instance (3·10^6 exports,
// 31 MB, took 7.9 s and 1 GB to compile and 0.2 s per instance). A module over one is refused.
const (
	MaxExports = 10_000
	MaxImports = 10_000
)

// Defaults applied by Limits for zero fields.
const (
	DefaultMaxMemoryPages    = 1024 // 64 MiB
	DefaultMaxTableElements  = 100_000
	DefaultMaxFunctions      = 100_000
	DefaultMaxLocals         = 1_000_000
	DefaultMaxNestingDepth   = 10_000
	DefaultMaxLoopDepth      = 100
	DefaultMaxNestingWork    = 400_000_000
	DefaultMaxBlockWork      = 200_000_000
	DefaultMaxFunctionBytes  = 1 << 20
	DefaultMaxKeyBytes       = 64 << 10
	DefaultMaxNameBytes      = 64 << 10
	DefaultMaxValueBytes     = 1 << 20
	DefaultMaxOutputsPerCall = 65536
	DefaultMaxWritesPerCall  = 65536
	DefaultMaxLogBytes       = 4 << 10
	DefaultMaxEmitBytes      = 64 << 20 // per call, see Limits.MaxEmitBytesPerCall
	DefaultMaxStateBytes     = 64 << 20 // per call, see Limits.MaxStateBytesPerCall
	DefaultMaxLogLinesPerSec = 1000
	DefaultLogBurstLines     = 10000
	DefaultFuelPerRecord     = 100_000_000   // ~20–200 ms of guest CPU, see Limits.FuelPerRecord
	DefaultInitFuel          = 1_000_000_000 // a standard Go guest's start-up spends ~10^6
	DefaultMaxCallDepth      = 20_000        // stack units, see Limits.MaxCallDepth

	// NoFuel, as Limits.FuelPerRecord, disables fuel metering.
	NoFuel = -1

	// maxPages is the most pages a 32-bit wasm memory can have (4 GiB).
	maxPages = 65536
)

// Limits bound what one module's instances may use. The zero value of each field means its
// default; negative values are invalid. Limits are fixed at Compile and shared by every Instance
// of the Module.
//
// The CPU bound is fuel: see "CPU time" in the package documentation.
type Limits struct {
	// MaxMemoryPages caps each instance's linear memory, in 64 KiB pages (default 1024 = 64 MiB,
	// at most 65536). A module whose declared minimum is larger is refused; memory.grow past it
	// returns -1 to the guest.
	MaxMemoryPages uint32
	// MaxTableElements caps the elements of each instance's tables together (default 100,000:
	// about 800 KB, a wazero table element being a pointer; a standard Go guest's one table
	// starts at about 6,000, one per function). A module whose tables' minimums add up to more,
	// or whose element segments hold more elements together (each instance holds them: one
	// segment of 10^7 took 16 s to compile and 4.8 s to instantiate), is refused; table.grow past it returns -1 to the guest (each table's maximum is lowered
	// to its minimum plus an equal share of the room left: fuel.LimitTables).
	MaxTableElements uint32
	// What a module may declare, checked by Compile before anything is compiled (see
	// fuel.Declared): MaxFunctions its defined functions (default 100,000; a standard Go guest
	// defines about 1,500-2,200); MaxLocals the locals of all its functions together (default
	// 1,000,000; a Go guest declares about 6,000-9,000, and each costs memory in the compiled
	// code); MaxNestingDepth the nesting of blocks, loops and ifs (default 10,000; Go guests
	// nest 549 deep), MaxLoopDepth that of loops alone (default 100; real code nests a few
	// deep, and metered loops are the costliest to compile); MaxNestingWork the sum over every
	// instruction of its nesting depth (default 4·10^8), which the compiler's time follows at
	// about 15-25 ns a unit (a Go guest: 2-4·10^7, half a second); MaxBlockWork the sum over
	// its functions of the square of their blocks (fuel.Declared.BlockWork; default 2·10^8),
	// which the compiler's time follows at 10-50 ns a unit (a Go guest: about 2·10^7, its
	// largest function 1,399 blocks; one function of 50,000 br_if, 200 KB, took 118 s);
	// MaxFunctionBytes the size of each function body (default 1 MiB; a Go guest's largest is
	// about 30 KB; a function of 58 MB took 66 s and 3.6 GB to compile, of 2.9 MB 0.8 s and
	// 190 MB).
	MaxFunctions     int
	MaxLocals        int
	MaxNestingDepth  int
	MaxLoopDepth     int
	MaxNestingWork   int64
	MaxBlockWork     int64
	MaxFunctionBytes int
	// MaxKeyBytes caps the key of an emitted record (default 64 KiB): ERR_TOO_LARGE.
	MaxKeyBytes int
	// MaxNameBytes caps a state name and an output name (default 64 KiB): ERR_TOO_LARGE.
	MaxNameBytes int
	// MaxValueBytes caps a state value, an emitted value and an emitted Headers layout
	// (default 1 MiB): ERR_TOO_LARGE.
	MaxValueBytes int
	// MaxRecordBytes caps an emitted record as a Kafka producer sizes it in a batch: key, value,
	// header names and values, plus RecordOverheadBytes and HeaderOverheadBytes per header.
	// Over it the emit gets ERR_TOO_LARGE. 0: no cap (the host sets it for a Kafka output,
	// which would otherwise fail the record at the next flush and halt the task).
	MaxRecordBytes int
	// MaxOutputsPerCall caps emits per call (default 65536): ERR_LIMIT.
	MaxOutputsPerCall int
	// MaxWritesPerCall caps state_put plus state_delete calls per call (default 65536): ERR_LIMIT.
	MaxWritesPerCall int
	// MaxEmitBytesPerCall caps the bytes one call may emit: the sum over its emits of key,
	// value and Headers layout (default 64 MiB). The emit that would pass it gets ERR_LIMIT and
	// the call fails with an error naming the budget, whatever the guest returns.
	MaxEmitBytesPerCall int
	// MaxStateBytesPerCall caps the state bytes one call may write: the sum over its
	// state_put, state_delete, timer_set and timer_delete of name and value or payload
	// (default 64 MiB). Beyond it: ERR_LIMIT and the call fails, like MaxEmitBytesPerCall.
	MaxStateBytesPerCall int
	// KeyTxnEntries and KeyTxnBytes cap what the writes and timer operations of one call cost
	// per key, in the store's estimate (store.StateWriteCost, store.TimerOpCost, with the key's
	// mark), so that a key's writes always fit the one store transaction that commits them
	// atomically. The host sets them from store.DB.KeyLimits; the defaults are the store's
	// defaults (store.DefaultMaxTxnEntries, store.DefaultMaxTxnBytes). Beyond them: ERR_LIMIT
	// and the call fails. Besides, a state name or timer name whose key and name together are
	// over what the store can hold for the task (store.StateKeyRoom, store.TimerKeyRoom) is
	// ERR_TOO_LARGE, and the call fails when it was a write.
	KeyTxnEntries int
	KeyTxnBytes   int
	// MaxLogLinesPerSecond and LogBurstLines rate-limit the log lines of the module's
	// instances together (log calls and captured stdout/stderr lines): a token bucket of
	// LogBurstLines (default 10000) refilled at MaxLogLinesPerSecond (default 1000). Lines
	// beyond it are dropped (not an error), counted (Module.LogDropped) and summarised in
	// a warning at most once a second.
	MaxLogLinesPerSecond int
	LogBurstLines        int
	// MaxLogBytes truncates each log message, fail message and captured stdout/stderr line
	// (default 4 KiB). Truncation is not an error.
	MaxLogBytes int
	// FuelPerRecord is the CPU budget of a wasmstream_process call per record it carries, in
	// fuel units (an upper bound of the wasm instructions executed, close for Rust and C,
	// several times coarser for standard Go; see package fuel for how they are counted):
	// a call over n records may spend n × FuelPerRecord (saturating), its wasmstream_alloc
	// and wasmstream_process calls together. A call that exceeds it stops with a
	// *FuelError and breaks the instance. Default DefaultFuelPerRecord (10^8). NoFuel (-1)
	// disables metering: the module runs unmodified and nothing bounds the CPU time of a call.
	FuelPerRecord int64
	// InitFuel is the budget of each start-up call: the start function, _initialize,
	// wasmstream_abi_version, wasmstream_init and the alloc for its payload. Default
	// DefaultInitFuel (10^9). Ignored when FuelPerRecord is NoFuel.
	InitFuel int64
	// MaxCallDepth bounds the guest's call stack, which the runtime keeps outside the linear
	// memory (and outside MaxMemoryPages): in stack units, a function's frame costing 1 unit plus
	// 1 per fuel.LocalsPerUnit (16) of its params and locals (fuel.FrameUnits). A call whose
	// nested guest calls go deeper traps with a *CallDepthError and breaks the instance. Default
	// DefaultMaxCallDepth (20,000: see CallDepthError for what a unit costs). Enforced by the
	// metering rewrite: ignored when FuelPerRecord is NoFuel (the runtime's own bound, a stack of
	// about 100 MiB, then applies).
	MaxCallDepth int
	// Grants are the WASI capabilities instances get; the zero value grants none (see Grants).
	Grants Grants
}

// RecordOverheadBytes and HeaderOverheadBytes bound what a Kafka record batch adds to an
// emitted record's bytes (MaxRecordBytes): the batch header (61 bytes), the record's length,
// attributes, timestamp and offset deltas, key and value lengths and header count as varints,
// and each header's two length varints.
const (
	RecordOverheadBytes = 128
	HeaderOverheadBytes = 10
)

// metered reports whether modules compiled under l are fuel-metered.
func (l Limits) metered() bool { return l.FuelPerRecord != NoFuel }

// Validate reports every invalid field at once.
func (l Limits) Validate() error {
	var errs []error
	if l.MaxMemoryPages > maxPages {
		errs = append(errs, fmt.Errorf("limits: MaxMemoryPages %d is over %d (4 GiB)", l.MaxMemoryPages, maxPages))
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxKeyBytes", l.MaxKeyBytes},
		{"MaxNameBytes", l.MaxNameBytes},
		{"MaxValueBytes", l.MaxValueBytes},
		{"MaxRecordBytes", l.MaxRecordBytes},
		{"MaxOutputsPerCall", l.MaxOutputsPerCall},
		{"MaxWritesPerCall", l.MaxWritesPerCall},
		{"MaxLogBytes", l.MaxLogBytes},
		{"MaxEmitBytesPerCall", l.MaxEmitBytesPerCall},
		{"MaxStateBytesPerCall", l.MaxStateBytesPerCall},
		{"KeyTxnEntries", l.KeyTxnEntries},
		{"KeyTxnBytes", l.KeyTxnBytes},
		{"MaxLogLinesPerSecond", l.MaxLogLinesPerSecond},
		{"LogBurstLines", l.LogBurstLines},
		{"MaxFunctions", l.MaxFunctions},
		{"MaxLocals", l.MaxLocals},
		{"MaxNestingDepth", l.MaxNestingDepth},
		{"MaxLoopDepth", l.MaxLoopDepth},
		{"MaxFunctionBytes", l.MaxFunctionBytes},
		{"MaxCallDepth", l.MaxCallDepth},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("limits: %s is negative (%d)", f.name, f.v))
		}
	}
	if l.FuelPerRecord < NoFuel {
		errs = append(errs, fmt.Errorf("limits: FuelPerRecord is %d; want > 0, 0 for the default or %d to disable metering", l.FuelPerRecord, NoFuel))
	}
	if l.MaxNestingWork < 0 {
		errs = append(errs, fmt.Errorf("limits: MaxNestingWork is negative (%d)", l.MaxNestingWork))
	}
	if l.MaxBlockWork < 0 {
		errs = append(errs, fmt.Errorf("limits: MaxBlockWork is negative (%d)", l.MaxBlockWork))
	}
	if l.InitFuel < 0 {
		errs = append(errs, fmt.Errorf("limits: InitFuel is negative (%d)", l.InitFuel))
	}
	errs = append(errs, l.Grants.validate()...)
	return errors.Join(errs...)
}

// withDefaults returns l with every zero field set to its default.
func (l Limits) withDefaults() Limits {
	if l.MaxMemoryPages == 0 {
		l.MaxMemoryPages = DefaultMaxMemoryPages
	}
	if l.MaxTableElements == 0 {
		l.MaxTableElements = DefaultMaxTableElements
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&l.MaxKeyBytes, DefaultMaxKeyBytes)
	def(&l.MaxNameBytes, DefaultMaxNameBytes)
	def(&l.MaxValueBytes, DefaultMaxValueBytes)
	def(&l.MaxOutputsPerCall, DefaultMaxOutputsPerCall)
	def(&l.MaxWritesPerCall, DefaultMaxWritesPerCall)
	def(&l.MaxLogBytes, DefaultMaxLogBytes)
	def(&l.MaxEmitBytesPerCall, DefaultMaxEmitBytes)
	def(&l.MaxStateBytesPerCall, DefaultMaxStateBytes)
	def(&l.KeyTxnEntries, store.DefaultMaxTxnEntries)
	def(&l.KeyTxnBytes, store.DefaultMaxTxnBytes)
	def(&l.MaxLogLinesPerSecond, DefaultMaxLogLinesPerSec)
	def(&l.LogBurstLines, DefaultLogBurstLines)
	def(&l.MaxFunctions, DefaultMaxFunctions)
	def(&l.MaxLocals, DefaultMaxLocals)
	def(&l.MaxNestingDepth, DefaultMaxNestingDepth)
	def(&l.MaxLoopDepth, DefaultMaxLoopDepth)
	def(&l.MaxFunctionBytes, DefaultMaxFunctionBytes)
	def(&l.MaxCallDepth, DefaultMaxCallDepth)
	if l.MaxNestingWork == 0 {
		l.MaxNestingWork = DefaultMaxNestingWork
	}
	if l.MaxBlockWork == 0 {
		l.MaxBlockWork = DefaultMaxBlockWork
	}
	if l.FuelPerRecord == 0 {
		l.FuelPerRecord = DefaultFuelPerRecord
	}
	if l.InitFuel == 0 {
		l.InitFuel = DefaultInitFuel
	}
	l.Grants = l.Grants.clone()
	return l
}
