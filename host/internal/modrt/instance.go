package modrt

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/fuel"
)

const pageSize = 65536

// InstanceConfig configures one Instance. Only Task is required in practice; every other zero
// value has a default.
type InstanceConfig struct {
	// Task names the task in log records and errors.
	Task string
	// Config is the task's configuration (a JSON object), passed in the Init payload and returned
	// by config_get. Empty means "{}". It is copied.
	Config []byte
	// Logger receives the guest's log calls and its stdout (info) and stderr (warn) lines, with a
	// "task" attribute. nil discards them.
	Logger *slog.Logger
	// Now returns the processing time in ms since the Unix epoch, for now_ms and for emits with a
	// negative timestamp. nil means the wall clock.
	Now func() int64
	// Outputs, when not empty, lists the output names the task may emit to; emit to any other
	// name returns ERR_INVALID. Empty means any name.
	Outputs []string
	// StatelessOnly makes every state function return ERR_NOT_ALLOWED.
	StatelessOnly bool
	// Metrics receives the metrics the guest declares (ABI 0.3), shared by every instance given
	// the same set. nil gives the instance a set of its own.
	Metrics *Metrics
	// RecordLimit, if set, returns the largest record (counted as Limits.MaxRecordBytes counts
	// it) that the output named output takes, e.g. its Kafka topic's max.message.bytes; 0 or
	// more than Limits.MaxRecordBytes: Limits.MaxRecordBytes. An emit over it returns
	// ERR_TOO_LARGE. output is a view into guest memory, valid during the call only.
	RecordLimit func(output []byte) int
}

// Env gives a call read access to committed state. The host implements it for one Process call;
// it is called only from the goroutine calling Process, and only during that call.
//
// key is the Key of a record passed to Process (the caller's own bytes). name, prefix and after
// are views into guest memory, valid only until the method returns: copy them to keep them.
// An error makes the host function return ERR_INTERNAL to the guest and fails the whole call
// (Process returns a *CallError wrapping it) even if the guest then returns 0.
type Env interface {
	// StateGet returns the committed value of state[key][name]. val is only read, never modified
	// or kept after the call.
	StateGet(key, name []byte) (val []byte, ok bool, err error)
	// StateScan calls fn for each committed name of state[key] that starts with prefix and sorts
	// after after (every name with the prefix when fromStart), in ascending bytewise order, until
	// fn returns false. name and val are only read during fn.
	StateScan(key, prefix, after []byte, fromStart bool, fn func(name, val []byte) bool) error
}

// TimerGate is implemented by an Env that bounds the task's pending timers (ABI.md §4.10, §10:
// max_pending_timers). timer_set asks it once per call for each (key, name) it sets.
type TimerGate interface {
	// ReserveTimer reports whether timer name of key may be set: it exists already (replacing
	// it costs nothing), or there is room for one more pending timer, which the gate then holds
	// for the call until its effects are applied or discarded. false: timer_set returns
	// ERR_LIMIT (the gate logs why).
	ReserveTimer(key, name []byte) (ok bool, err error)
}

// Effects are the results of a successful Process call, in the order the guest issued them.
// Every byte slice is owned by the caller (copied out of guest memory) and never written again;
// Write.Key slices of the same record key share one copy, and small outputs share larger blocks
// with other outputs of the same instance (a block is freed once none of its outputs is
// referenced).
type Effects struct {
	Writes  []Write
	Outputs []Output
	// Timers are the call's timer_set and timer_delete, in order (ABI 0.2).
	Timers []TimerOp
	// Fuel is the fuel the call spent (its wasmstream_alloc and wasmstream_process calls);
	// 0 when the module is not metered.
	Fuel int64
}

// Write is one state_put (Delete false) or state_delete (Delete true, Value nil).
type Write struct {
	Key, Name, Value []byte
	Delete           bool
}

// Output is one emitted record.
type Output struct {
	// Name is the output the guest emitted to.
	Name       string
	Key, Value []byte
	// ValueNull: the guest emitted a null value (ABI 0.5, val_len -1: a tombstone); Value is
	// then nil. Otherwise Value is never nil, even when empty.
	ValueNull bool
	Headers   []abi.Header
	// Timestamp is the guest's timestamp, or InstanceConfig.Now() at the emit when it was negative.
	Timestamp int64
}

// phase is what the guest is being called for; it decides which host functions are allowed.
type phase uint8

const (
	phaseIdle    phase = iota // no call in progress
	phaseStart                // instantiation, _initialize, wasmstream_abi_version, wasmstream_alloc
	phaseInit                 // wasmstream_init
	phaseProcess              // wasmstream_process
)

// Instance is one instantiated module: its own memory and globals, and the per-call state the host
// functions work on. An Instance is NOT safe for concurrent use: one goroutine at a time calls
// Process (the scheduler's worker that owns it). After a failed call with CallError.Trap set,
// Broken reports true and the Instance must be closed and replaced.
type Instance struct {
	mod            api.Module
	mem            api.Memory
	fnAlloc        api.Function
	fnInit         api.Function
	fnProcess      api.Function
	fnOnTimer      api.Function // nil: not exported (ABI 0.2 exports are optional)
	fnOnTick       api.Function
	fnMigrate      api.Function
	stateVers      uint32 // wasmstream_state_version after init, 0 when not exported
	fnStateVersion api.Function
	stack          [2]uint64         // params and results of export calls, reused
	closeFS        func()            // closes the granted directories (Grants.apply)
	cctx           callCtx           // the context handed to the guest during a call, reused
	fuel           api.MutableGlobal // the fuel counter (fuel.GlobalExport); nil when not metered
	depth          api.MutableGlobal // the stack counter (fuel.StackExport); nil when not metered
	spent          int64             // fuel spent by calls since the last reset
	meter          fuel.Meter        // hands out the current call's budget a slice at a time (slice.go)
	interrupted    *atomic.Bool      // Runtime.Interrupt was called
	stopErr        error             // why the current call stopped at the end of a slice (slice.go)
	moved          int               // bytes the current host function copied, charged after it (slice.go)

	lim       Limits
	task      string
	config    []byte
	log       *slog.Logger
	logAttrs  []slog.Attr // what the current call processes (key, partition, offset), for its logs
	now       func() int64
	outputs   []string
	recLimit  func(output []byte) int // InstanceConfig.RecordLimit
	stateless bool
	stdout    *lineWriter
	stderr    *lineWriter
	logLim    *logLimiter
	refused   *refusalLog // the module's rate limit of refused-request warnings (http.go)
	// filesWarned: the instance logged that it holds MaxOpenFiles (filesRefused)
	filesWarned bool

	phase  phase
	broken bool
	closed bool

	// Per-call state, reset by beginCall.
	env    Env
	scope  scope
	writes []Write
	outs   []Output
	timers []TimerOp
	// timerIDs: the timers the call's timer_set has passed the Env's TimerGate for, which
	// asks each (key, name) once per call.
	timerIDs map[timerKey]struct{}
	wm       int64 // the unit's watermark, for watermark_ms
	allKeys  bool  // a tick: every key of the partition is in scope
	failMsg  string
	// permanent: the guest called fail_permanent during the call (callPayload).
	permanent bool
	envErr    error
	overErr   error   // a budget or store limit the call went over: the call fails (budget.go)
	emitN     int     // bytes emitted by the call, against Limits.MaxEmitBytesPerCall
	stateN    int     // state bytes written by the call, against Limits.MaxStateBytesPerCall
	scanTmp   []int32 // scratch for state_scan's overlay: indexes in writes
	// prevWrite[j] is 1 + the index in writes of the write before writes[j] to the same key (0:
	// none); see scopeKey.last. Reused between calls.
	prevWrite []int32
	// slab is the block the small copies of outputs are carved from (carve); it is only
	// appended to, so carved copies are never written again.
	slab []byte

	writesHint, outsHint int               // the previous call's counts, for sizeHint
	interned             map[string]string // output names seen, when Outputs is empty
	abiVers              uint32
	observer             func(fn int, result int64) // tests only: sees every host function result
	http                 httpCall                   // outbound HTTP (http.go)
	metrics              *Metrics                   // where metric_declare declares (metrics.go)
	myMetrics            []*metricSeries            // the series this instance declared; an id indexes it
}

// callCtx is the context.Context passed to the guest for one call. Host functions find their
// Instance with a type assertion on it (see instanceOf), which is cheaper than a context value
// lookup. It wraps the caller's context only for the duration of the call.
type callCtx struct {
	context.Context
	inst *Instance
}

type instanceKey struct{}

// Value makes the Instance reachable with ctx.Value(instanceKey{}) should a wrapper hide callCtx.
func (c *callCtx) Value(key any) any {
	if key == (instanceKey{}) {
		return c.inst
	}
	return c.Context.Value(key)
}

// instanceOf returns the Instance whose call is in progress, or nil.
func instanceOf(ctx context.Context) *Instance {
	if c, ok := ctx.(*callCtx); ok {
		return c.inst
	}
	i, _ := ctx.Value(instanceKey{}).(*Instance)
	return i
}

// Instantiate creates an Instance: it instantiates the module with an anonymous name and the
// sandboxed WASI (no files, environment, arguments or network; a fake clock and a deterministic
// random source; stdout and stderr captured into cfg.Logger), runs _initialize when exported,
// checks the ABI version and calls wasmstream_init with the Init payload. A failing or trapping
// init returns a *CallError naming the task and carrying the guest's fail message. Instantiate is
// safe for concurrent use.
func (m *Module) Instantiate(ctx context.Context, cfg InstanceConfig) (*Instance, error) {
	i, err := m.newInstance(ctx, cfg)
	if err != nil {
		return nil, err
	}
	n := 12 + len(i.task) + len(i.config)
	ptr, buf, err := i.place(ctx, abi.ExportInit, n, i.initBudget())
	if err == nil {
		b := abi.AppendInit(buf[:0], abi.Init{Version: abi.Version, Task: []byte(i.task), Config: i.config})
		if len(b) != n || &b[0] != &buf[0] {
			err = fmt.Errorf("internal error: Init payload size %d, expected %d", len(b), n)
		} else {
			err = i.callPayload(ctx, phaseInit, abi.ExportInit, i.fnInit, ptr, n, i.initBudget())
		}
	}
	if err == nil && i.fnStateVersion != nil {
		// Asked after init: a guest may choose its state version from its configuration.
		if err = i.call(ctx, phaseStart, abi.ExportStateVersion, i.fnStateVersion, i.stack[:1], i.initBudget()); err == nil {
			if v := int32(uint32(i.stack[0])); v < 0 {
				err = moduleErr(nil, fmt.Sprintf("%s returned %d; a state version is >= 0", abi.ExportStateVersion, v))
			} else {
				i.stateVers = uint32(v)
			}
		}
	}
	if err != nil {
		_ = i.Close(ctx)
		return nil, err
	}
	return i, nil
}

// newInstance instantiates the module and runs everything before wasmstream_init.
func (m *Module) newInstance(ctx context.Context, cfg InstanceConfig) (*Instance, error) {
	if m.isClosed() {
		return nil, ErrClosed
	}
	i := m.instanceState(cfg)
	if err := i.instantiate(ctx, m); err != nil {
		return nil, err
	}
	if err := i.prepare(ctx, m); err != nil {
		_ = i.Close(ctx)
		return nil, err
	}
	return i, nil
}

// instanceState returns the Instance of cfg before instantiation: its configuration with the
// defaults filled in, its log writers and its links to the module's engine.
func (m *Module) instanceState(cfg InstanceConfig) *Instance {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With(slog.String("task", cfg.Task))
	now := cfg.Now
	if now == nil {
		now = func() int64 { return time.Now().UnixMilli() }
	}
	config := []byte("{}")
	if len(cfg.Config) > 0 {
		config = append([]byte(nil), cfg.Config...)
	}
	i := &Instance{
		lim:       m.lim,
		task:      cfg.Task,
		config:    config,
		log:       logger,
		now:       now,
		outputs:   append([]string(nil), cfg.Outputs...),
		recLimit:  cfg.RecordLimit,
		stateless: cfg.StatelessOnly,
		metrics:   cfg.Metrics,
		stdout:    &lineWriter{log: logger, level: slog.LevelInfo, stream: "stdout", max: m.lim.MaxLogBytes, keepLast: true, lim: m.logLim},
		stderr:    &lineWriter{log: logger, level: slog.LevelWarn, stream: "stderr", max: m.lim.MaxLogBytes, lim: m.logLim},
		logLim:    m.logLim,
		refused:   &m.refused,
	}
	if i.metrics == nil {
		i.metrics = NewMetrics()
	}
	i.stdout.attrs, i.stderr.attrs = &i.logAttrs, &i.logAttrs
	i.stdout.charge, i.stderr.charge = i.chargeWrite, i.chargeWrite
	i.cctx.inst = i
	i.meter.Slice = sliceFuel
	i.interrupted = m.eng.interrupted
	i.observer = m.observer
	i.http.client = m.http
	return i
}

// instantiate instantiates m's compiled module for i, with the sandboxed WASI and i's grants.
// On an error nothing is left open.
func (i *Instance) instantiate(ctx context.Context, m *Module) error {
	mc := wazero.NewModuleConfig().
		WithName("").         // anonymous: any number of instances of one module
		WithStartFunctions(). // _initialize is called below, like every other export
		WithStdout(i.stdout).
		WithStderr(i.stderr).
		WithRandSource(m.lim.Grants.randSource(i.chargeRandom))
	mc, closeFS, err := m.lim.Grants.apply(mc, i.chargeWrite, i.filesRefused)
	if err != nil {
		return fmt.Errorf("task %q: %w", i.task, err)
	}
	i.closeFS = closeFS
	// Host functions called by a start section see phaseStart.
	i.phase, i.cctx.Context = phaseStart, withMemoryAllocator(ctx, m.eng.memory)
	mod, err := m.eng.rt.InstantiateModule(&i.cctx, m.compiled, mc)
	i.phase, i.cctx.Context = phaseIdle, context.Background()
	if err != nil {
		i.closeFS()
		return fmt.Errorf("task %q: instantiate: %w", i.task, err)
	}
	i.mod = mod
	i.mem = mod.Memory()
	return nil
}

// prepare finds the instantiated module's counters and exports, runs its start function (moved
// there by metering) and _initialize, and checks the ABI version it declares. The caller closes
// the Instance on an error.
func (i *Instance) prepare(ctx context.Context, m *Module) error {
	mod := i.mod
	if m.metered {
		g, ok := mod.ExportedGlobal(fuel.GlobalExport).(api.MutableGlobal)
		if !ok {
			return fmt.Errorf("task %q: internal error: the fuel counter is missing after metering", i.task)
		}
		i.fuel = g
		if i.depth, ok = mod.ExportedGlobal(fuel.StackExport).(api.MutableGlobal); !ok {
			return fmt.Errorf("task %q: internal error: the stack counter is missing after metering", i.task)
		}
	}
	i.fnAlloc = mod.ExportedFunction(abi.ExportAlloc)
	i.fnInit = mod.ExportedFunction(abi.ExportInit)
	i.fnProcess = mod.ExportedFunction(abi.ExportProcess)
	fnVersion := mod.ExportedFunction(abi.ExportABIVersion)
	if i.mem == nil || i.fnAlloc == nil || i.fnInit == nil || i.fnProcess == nil || fnVersion == nil {
		// Compile checked the exports: unreachable.
		return fmt.Errorf("task %q: internal error: exports missing after validation", i.task)
	}
	if m.start {
		// The start section was moved here by metering, so that it runs within a budget.
		fn := mod.ExportedFunction(fuel.StartExport)
		if fn == nil {
			return fmt.Errorf("task %q: internal error: the start function is missing after metering", i.task)
		}
		if err := i.call(ctx, phaseStart, "start function", fn, nil, i.initBudget()); err != nil {
			return err
		}
	}
	if fn := mod.ExportedFunction(abi.ExportInitialize); fn != nil {
		if err := i.call(ctx, phaseStart, abi.ExportInitialize, fn, nil, i.initBudget()); err != nil {
			return err
		}
	}
	return i.checkABI(ctx, m, fnVersion)
}

// checkABI calls the guest's wasmstream_abi_version (fnVersion), refuses a version this host does
// not speak or one older than the imports the module uses, and finds the exports of the version.
func (i *Instance) checkABI(ctx context.Context, m *Module, fnVersion api.Function) error {
	if err := i.call(ctx, phaseStart, abi.ExportABIVersion, fnVersion, i.stack[:1], i.initBudget()); err != nil {
		return err
	}
	i.abiVers = uint32(i.stack[0])
	if !abi.Compatible(i.abiVers) {
		return moduleErr(nil, abiMismatch(i.abiVers))
	}
	if problems := m.newerImports(i.abiVers); len(problems) > 0 {
		return moduleErr(nil, problems...)
	}
	if i.abiVers&0xffff >= 2 {
		// 0.2 exports; a 0.1 guest's are ignored (ABI.md §2).
		mod := i.mod
		i.fnOnTimer = mod.ExportedFunction(abi.ExportOnTimer)
		i.fnOnTick = mod.ExportedFunction(abi.ExportOnTick)
		i.fnMigrate = mod.ExportedFunction(abi.ExportMigrate)
		i.fnStateVersion = mod.ExportedFunction(abi.ExportStateVersion)
	}
	return nil
}

func abiMismatch(v uint32) string {
	return fmt.Sprintf("declares ABI %s; this host speaks %s", abi.VersionString(v), abi.VersionString(abi.Version))
}

// Process runs one wasmstream_process call over recs.
//
// The Batch is encoded straight into guest memory obtained from wasmstream_alloc. The call's scope
// is the set of record keys in recs (DESIGN S12): state functions for any other key return
// ERR_KEY_NOT_IN_BATCH. State writes go to a per-call overlay that later reads and scans of the
// same call see (scans merge it with env.StateScan; deletions hide names). A nil env behaves as
// empty committed state.
//
// recs and its byte slices must not change during the call; they are not retained. On success the
// Effects are returned (owned by the caller). On failure Process returns a *CallError and no
// effects; when CallError.Trap is set the Instance is broken (see Broken). ErrBatchTooLarge,
// ErrBroken, ErrClosed and ctx's error are returned without calling the guest. After any error,
// check Broken.
//
// The call's CPU time is bounded by fuel (Limits.FuelPerRecord × len(recs)); a call that spends
// it returns a *CallError whose Err is a *FuelError, and breaks the instance. ctx is checked
// before the call and, for a metered module, at the end of every time slice (slice.go): a call
// whose ctx ends stops there with a *CallError whose Err is ctx's error, and breaks the instance.
func (i *Instance) Process(ctx context.Context, recs []abi.Record, env Env) (Effects, error) {
	steps := [1]Step{{Kind: StepRecords, Records: recs}}
	return i.Run(ctx, &Unit{Watermark: -1, Steps: steps[:]}, env)
}

// beginCall resets the per-call state.
func (i *Instance) beginCall(env Env) {
	i.env = env
	i.scope.reset()
	i.writes, i.outs, i.timers = nil, nil, nil
	clear(i.timerIDs)
	i.prevWrite = i.prevWrite[:0]
	i.wm, i.allKeys = -1, false
	i.failMsg, i.envErr, i.overErr = "", nil, nil
	i.permanent = false
	i.emitN, i.stateN = 0, 0
}

// endCall drops the per-call references (the effects now belong to the caller or are discarded).
func (i *Instance) endCall() {
	i.writesHint, i.outsHint = len(i.writes), len(i.outs)
	i.env = nil
	i.scope.reset()
	i.writes, i.outs, i.timers = nil, nil, nil
	i.prevWrite = i.prevWrite[:0]
	i.wm, i.allKeys = -1, false
	i.envErr, i.overErr = nil, nil
}

// place asks the guest for n bytes (wasmstream_alloc) and returns the region as a view. Any
// failure breaks the instance (a guest whose allocator fails is replaced like a trapped one) and is
// returned as a *CallError naming export, the call the payload is for.
func (i *Instance) place(ctx context.Context, export string, n int, b budget) (uint32, []byte, error) {
	i.failMsg = ""
	i.stack[0] = uint64(uint32(n))
	if err := i.call(ctx, phaseStart, abi.ExportAlloc, i.fnAlloc, i.stack[:1], b); err != nil {
		return 0, nil, err
	}
	ptr := uint32(i.stack[0])
	var (
		buf []byte
		ok  bool
	)
	if ptr != 0 {
		buf, ok = i.mem.Read(ptr, uint32(n))
	}
	if !ok || n == 0 {
		// A zero-size payload cannot happen (a Batch is at least 8 bytes, an Init 12).
		i.broken = true
		return 0, nil, &CallError{Task: i.task, Func: export, GuestMessage: i.failMsg,
			Err: fmt.Errorf("%w: returned %d for %d bytes (memory is %d bytes)", ErrAllocFailed, ptr, n, i.mem.Size())}
	}
	return ptr, buf, nil
}

// callPayload calls init or process with a payload placed by place and interprets the status.
func (i *Instance) callPayload(ctx context.Context, ph phase, export string, fn api.Function, ptr uint32, n int, b budget) error {
	i.stack[0], i.stack[1] = uint64(ptr), uint64(uint32(n))
	if err := i.call(ctx, ph, export, fn, i.stack[:2], b); err != nil {
		return err
	}
	rc := int32(uint32(i.stack[0]))
	if i.overErr != nil {
		// Whatever the guest made of its ERR_LIMIT or ERR_TOO_LARGE: the call fails, so that no
		// write or output is lost silently.
		return &CallError{Task: i.task, Func: export, GuestMessage: i.failMsg, Permanent: i.permanent, Err: i.overErr}
	}
	if i.permanent && i.envErr == nil {
		// fail_permanent (ABI §4.22): the call fails whatever it returned, and is not retried. A
		// call that met a host failure (ERR_INTERNAL) is the host's to retry, whatever the guest
		// made of it.
		return &CallError{Task: i.task, Func: export, Code: rc, GuestMessage: i.failMsg, Permanent: true, Err: ErrFailedPermanently}
	}
	if rc != 0 {
		return &CallError{Task: i.task, Func: export, Code: rc, GuestMessage: i.failMsg, Err: ErrGuestFailed}
	}
	if i.envErr != nil {
		return &CallError{Task: i.task, Func: export, GuestMessage: i.failMsg, Err: i.envErr}
	}
	return nil
}

// budget is the fuel one call may spend.
type budget struct {
	units     int64 // the budget, as the error reports it
	left      int64 // what the counter is set to: units minus what earlier calls sharing it spent
	perRecord int64 // 0 for a start-up call
	records   int
}

// initBudget is the budget of a start-up call.
func (i *Instance) initBudget() budget { return budget{units: i.lim.InitFuel, left: i.lim.InitFuel} }

// processBudget is the budget of a Process over n records: FuelPerRecord × max(n, 1), saturating.
func (i *Instance) processBudget(n int) budget {
	per := i.lim.FuelPerRecord
	units := per
	if n > 1 {
		if per > math.MaxInt64/int64(n) {
			units = math.MaxInt64
		} else {
			units = per * int64(n)
		}
	}
	return budget{units: units, left: units, perRecord: per, records: n}
}

// call is the one place the host enters the guest. A call that does not return normally breaks the
// instance and becomes a *CallError with Trap set.
//
// The CPU bound is set here: with a metered module, the fuel counter is set to the call's budget
// before the call and read after it; a trap with a negative counter is the module's own trap on
// exhausted fuel (package fuel) and becomes a *FuelError. WithCloseOnContextDone is deliberately not
// used (DESIGN S21).
func (i *Instance) call(ctx context.Context, ph phase, export string, fn api.Function, stack []uint64, b budget) error {
	if i.fuel != nil {
		i.fuel.Set(uint64(i.meter.Start(b.left)))
		i.depth.Set(uint64(uint32(min(i.lim.MaxCallDepth, math.MaxInt32))))
	}
	i.stopErr = nil
	i.phase, i.cctx.Context = ph, ctx
	i.stderr.resetTail()
	i.stdout.resetTail()
	err := fn.CallWithStack(&i.cctx, stack)
	i.http.endCall() // a kept HTTP response lives for one guest call (ABI §4.15)
	i.phase, i.cctx.Context = phaseIdle, context.Background()
	if i.fuel != nil {
		left := i.meter.Left(int64(i.fuel.Get()))
		i.spent += b.left - left
		switch {
		case err != nil && i.stopErr != nil:
			err = i.stopErr
		case err != nil && left < 0:
			i.spent = b.units
			err = &FuelError{Budget: b.units, PerRecord: b.perRecord, Records: b.records}
		case err != nil && int32(uint32(i.depth.Get())) < 0:
			err = &CallDepthError{Limit: i.lim.MaxCallDepth}
		}
	}
	if err != nil {
		i.broken = true
		return &CallError{Task: i.task, Func: export, Trap: true, GuestMessage: i.failMsg,
			GuestStderr: i.stderr.lines(), GuestStdout: i.stdout.lines(), Err: err}
	}
	return nil
}

// Broken reports whether a call trapped, exited or could not allocate its payload, leaving the guest
// in an unknown state. A broken Instance refuses Process with ErrBroken; close it and make a new one.
func (i *Instance) Broken() bool { return i.broken }

// Close releases the instance's memory and logs any pending partial stdout/stderr line. It is
// idempotent.
func (i *Instance) Close(ctx context.Context) error {
	if i.closed {
		return nil
	}
	i.closed = true
	i.stdout.flush()
	i.stderr.flush()
	if i.closeFS != nil {
		// After the module, which closes the files the guest left open.
		defer i.closeFS()
	}
	if i.mod == nil {
		return nil
	}
	// Closing the module unmaps its linear memory (linmem.go). Then drop every reference into
	// the instance (the caller may keep the *Instance): the call stacks wazero keeps per
	// exported function (Go memory beside the memory limit, up to about 84 MiB each after a deep
	// recursion) become garbage.
	err := i.mod.Close(ctx)
	i.mod, i.mem, i.fuel, i.depth = nil, nil, nil, nil
	i.fnAlloc, i.fnInit, i.fnProcess, i.fnOnTimer, i.fnOnTick, i.fnMigrate, i.fnStateVersion = nil, nil, nil, nil, nil, nil, nil
	i.env, i.writes, i.outs, i.timers, i.scanTmp = nil, nil, nil, nil, nil
	i.prevWrite, i.slab = nil, nil
	if i.broken {
		// A trapped instance is typically one that recursed until the stack overflowed, and a
		// replacement is about to be made: collect now, so that the replacement reuses the
		// stack's memory. Otherwise the collector would wait for the heap to double: with every
		// worker trapping, the process would hold several such stacks per worker.
		runtime.GC()
	}
	if err != nil {
		return fmt.Errorf("task %q: close: %w", i.task, err)
	}
	return nil
}

// filesRefused notes an open refused at MaxOpenFiles: logged at warn once per instance.
func (i *Instance) filesRefused() {
	if !i.filesWarned {
		i.filesWarned = true
		i.log.Warn("a file open refused: the module holds the most files an instance may keep open (close the files it no longer reads); the open fails with EAGAIN", "limit", MaxOpenFiles)
	}
}
