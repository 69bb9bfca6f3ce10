//go:build !wasip1

package wasmstreamtest

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/wasmstream/wasmstream/abi"
	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
	"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"
)

// Options configure a Host. The zero value is a task named "test" with config "{}", any output
// name allowed, a clock at 0 and no HTTP grant.
type Options struct {
	// Task is the task name in the Init payload; "" means "test".
	Task string
	// Config is the task configuration handed to init; nil means "{}".
	Config []byte
	// Outputs, when not empty, declares the task's outputs: Emit to any other name fails with
	// ErrInvalid, as on a host whose task declares its outputs.
	Outputs []string
	// NowMs is what wasmstream.NowMs returns until the test advances the clock (Host.AdvanceTime).
	NowMs int64
	// HTTP, when set, grants outbound HTTP and answers every wasmstream.HTTPDo in place of the
	// network; nil means no grant (HTTPDo fails with ErrNotAllowed). It receives copies. An error
	// that matches an ABI code (e.g. wasmstream.ErrNotAllowed, ErrTooLarge) is reported to the guest
	// as that code, any other error as ErrUnavailable. A nil response with a nil error is a 200
	// with no headers and no body.
	HTTP func(req *wasmstream.HTTPRequest) (*wasmstream.HTTPResponse, error)
}

// Input is one record of a batch. The zero value is partition 0, offset 0, timestamp 0 (the epoch;
// set -1 for unknown), an empty source and key.
type Input struct {
	Source    string
	Partition uint32
	Offset    int64
	Timestamp int64
	Late      bool
	Key       []byte
	Value     []byte
	// ValueNull hands the record with a null value (ABI 0.5, flag bit 2: a Kafka tombstone);
	// Value should then be empty.
	ValueNull bool
	Headers   []wasmstream.Header
}

// Output is one record a handler emitted; every field is a copy.
type Output struct {
	Name      string
	Key       []byte
	Value     []byte
	ValueNull bool                // emitted with a null value (a tombstone, ABI 0.5); Value is nil
	Headers   []wasmstream.Header // nil when emitted without headers
	Timestamp int64               // as passed by the guest: negative means "now"
}

// String formats o for test failures.
func (o Output) String() string {
	if o.ValueNull {
		return fmt.Sprintf("%s key=%q value=null ts=%d headers=%d", o.Name, o.Key, o.Timestamp, len(o.Headers))
	}
	return fmt.Sprintf("%s key=%q value=%q ts=%d headers=%d", o.Name, o.Key, o.Value, o.Timestamp, len(o.Headers))
}

// StateEntry is one state entry, state[Key][Name] = Value.
type StateEntry struct {
	Key   []byte
	Name  string
	Value []byte
}

// LogLine is one message a guest logged.
type LogLine struct {
	Level wasmstream.Level
	Msg   string
}

// Result is what a successful call produced.
type Result struct {
	// Outputs are the emitted records in emit order.
	Outputs []Output
	// State is the whole state after the call, sorted by key then name (bytewise).
	State []StateEntry
	// Logs are the messages logged during the call.
	Logs []LogLine
	// Fired are the timers delivered to the timer handler, in delivery order (FireDue,
	// AdvanceTime, AdvanceWatermark).
	Fired []Timer
}

// CallError is returned when a guest call fails.
type CallError struct {
	// Export is the failed export: "wasmstream_init", "wasmstream_process",
	// "wasmstream_on_timer", "wasmstream_on_tick" or "wasmstream_migrate".
	Export string
	// Code is the guest's non-zero return value (0 when it panicked).
	Code int32
	// Reason is the message the guest passed to fail (or fail_permanent), if any.
	Reason string
	// Permanent is set when the guest failed the call with fail_permanent (ABI 0.4: the handler
	// returned an error made by wasmstream.Permanent): the host would not retry it, and sends the
	// record to the dead letters at once.
	Permanent bool
	// Panic is the recovered panic value when the handler panicked (a trap in wasm).
	Panic any
	// Logs are the messages logged during the call.
	Logs []LogLine
}

func (e *CallError) Error() string {
	if e.Panic != nil {
		return fmt.Sprintf("wasmstreamtest: %s trapped: panic: %v", e.Export, e.Panic)
	}
	if e.Permanent {
		return fmt.Sprintf("wasmstreamtest: %s failed permanently (not retried): %s", e.Export, e.Reason)
	}
	return fmt.Sprintf("wasmstreamtest: %s returned %d: %s", e.Export, e.Code, e.Reason)
}

// Run makes a Host with opts, runs init and then all records as one batch, and returns the
// batch's result.
func Run(opts Options, records []Input) (Result, error) {
	h := New(opts)
	if err := h.Init(); err != nil {
		return Result{}, err
	}
	return h.Process(records...)
}

// Host is an in-memory wasmstream host serving the handlers registered in this program.
type Host struct {
	opts       Options
	state      map[string]map[string][]byte // committed state
	timers     map[timerID]*Timer           // committed timers
	versions   map[string]uint32            // recorded state version of keys with state (absent = 0)
	now        int64
	watermarks map[uint32]int64 // per partition; absent = -1

	// per unit of work (one or more guest calls committed together, ABI.md §3)
	writes   map[string]map[string][]byte // key → name → value (nil value = deleted)
	timerOps map[timerID]*Timer           // nil = deleted
	touched  map[string]bool              // keys whose recorded version becomes the module's
	outputs  []Output
	logs     []LogLine
	fired    []Timer

	// per guest call
	phase     phase
	scope     map[string]uint32 // key → partition
	scopeAll  bool              // a tick: every key is in scope
	partition uint32            // the call's partition
	reason    []byte
	permanent bool   // the guest called fail_permanent during the call
	httpKept  []byte // the last http_request response that did not fit

	metrics metricSet // guest metrics (harness03.go)
	inited  bool      // Init ran (explicitly, or before the first call that needed it)
}

type phase int

const (
	phaseIdle phase = iota
	phaseInit
	phaseProcess
	phaseTimer
	phaseTick
	phaseMigrate
)

// New makes a Host with empty state and installs it as the SDK's host, replacing any earlier one.
// The guest's init runs before the first call that needs an initialised instance (Process,
// FireTimers, Tick, Migrate, Metric), as the real host runs it, unless the test called Init
// first (to check what init returns, or again to stand for a replacement instance); an error of
// that implicit init is the call's error.
func New(opts Options) *Host {
	if opts.Task == "" {
		opts.Task = "test"
	}
	if opts.Config == nil {
		opts.Config = []byte("{}")
	}
	h := &Host{opts: opts, state: map[string]map[string][]byte{}, timers: map[timerID]*Timer{},
		versions: map[string]uint32{}, now: opts.NowMs, watermarks: map[uint32]int64{}}
	host.Current = h
	return h
}

// Init calls the guest's init with the task name and config.
func (h *Host) Init() error {
	if err := h.current("wasmstream_init"); err != nil {
		return err
	}
	h.inited = true
	h.beginUnit()
	h.metrics.ids = nil // a new instance: its declarations number from 0
	payload := abi.AppendInit(nil, abi.Init{Version: abi.Version, Task: []byte(h.opts.Task), Config: h.opts.Config})
	return h.guestCall(phaseInit, "wasmstream_init", payload, host.Guest.Init)
}

// Process calls the guest with one batch holding records, in order. On success the batch's state
// writes and timer changes are committed and its outputs returned; on failure nothing changes.
// Keys of the batch whose state has another recorded state version are migrated first, in the
// same unit of work (see Host.SetStateVersion).
func (h *Host) Process(records ...Input) (Result, error) {
	if err := h.ready("wasmstream_process"); err != nil {
		return Result{}, err
	}
	h.beginUnit()
	payload := abi.AppendBatchHeader(nil, len(records))
	scope := map[string]uint32{}
	var keys []string
	for _, in := range records {
		r := abi.Record{Partition: in.Partition, Offset: in.Offset, Timestamp: in.Timestamp,
			Source: []byte(in.Source), Key: in.Key, Value: in.Value, Headers: in.Headers}
		if in.Late {
			r.Flags |= abi.FlagLate
		}
		if in.ValueNull {
			r.Flags |= abi.FlagValueNull
		}
		payload = abi.AppendRecord(payload, &r)
		if _, ok := scope[string(in.Key)]; !ok {
			scope[string(in.Key)] = in.Partition
			keys = append(keys, string(in.Key))
		}
	}
	if err := h.migrateStale(keys, scope); err != nil {
		return Result{}, err
	}
	h.scope = scope
	if len(records) > 0 {
		h.partition = records[0].Partition
	}
	if err := h.guestCall(phaseProcess, "wasmstream_process", payload, host.Guest.Process); err != nil {
		return Result{}, err
	}
	return h.commitUnit(), nil
}

// current checks that h is the SDK's host.
func (h *Host) current(export string) error {
	if host.Current != h {
		return fmt.Errorf("wasmstreamtest: %s: another Host was made after this one", export)
	}
	return nil
}

// ready is current for a call that needs an initialised instance: it runs init first if no
// init ran yet.
func (h *Host) ready(export string) error {
	if err := h.current(export); err != nil {
		return err
	}
	if !h.inited {
		if err := h.Init(); err != nil {
			return fmt.Errorf("wasmstreamtest: %s: init (run before the first call): %w", export, err)
		}
	}
	return nil
}

// beginUnit starts a unit of work: nothing of it is visible in the committed state until
// commitUnit.
func (h *Host) beginUnit() {
	h.writes, h.timerOps, h.touched = map[string]map[string][]byte{}, map[timerID]*Timer{}, map[string]bool{}
	h.outputs, h.logs, h.fired = nil, nil, nil
}

// guestCall writes payload into the guest's input buffer and calls fn, with the scope the caller
// set in h.scope, h.scopeAll and h.partition (reset when it returns).
func (h *Host) guestCall(p phase, export string, payload []byte, fn func(int32) int32) (err error) {
	h.phase, h.reason, h.httpKept, h.permanent = p, nil, nil, false
	for key := range h.scope {
		h.touched[key] = true
	}
	defer func() {
		h.phase, h.scope, h.scopeAll, h.partition, h.httpKept = phaseIdle, nil, false, 0, nil
		if v := recover(); v != nil {
			err = &CallError{Export: export, Panic: v, Reason: string(h.reason), Logs: h.logs}
		}
	}()
	if fn == nil {
		return fmt.Errorf("wasmstreamtest: %s: the SDK does not provide this export", export)
	}
	buf := host.Guest.Alloc(int32(len(payload)))
	if len(buf) != len(payload) {
		return fmt.Errorf("wasmstreamtest: wasmstream_alloc(%d) failed", len(payload))
	}
	copy(buf, payload)
	if rc := fn(int32(len(payload))); rc != 0 || (h.permanent && p != phaseInit) {
		// fail_permanent fails the call whatever it returns (ABI.md §4.22), except in init.
		return &CallError{Export: export, Code: rc, Reason: string(h.reason), Permanent: h.permanent && p != phaseInit, Logs: h.logs}
	}
	return nil
}

// commitUnit applies the unit's state writes and timer changes, records the module's state
// version for the keys it involved, and returns its result.
func (h *Host) commitUnit() Result {
	for key, names := range h.writes {
		h.touched[key] = true
		for name, v := range names {
			h.commit(key, name, v)
		}
	}
	for id, t := range h.timerOps {
		if t == nil {
			delete(h.timers, id)
		} else {
			h.timers[id] = t
		}
	}
	v := h.moduleVersion()
	for key := range h.touched {
		if len(h.state[key]) > 0 {
			h.versions[key] = v
		} else {
			delete(h.versions, key)
		}
	}
	res := Result{Outputs: h.outputs, State: h.State(), Logs: h.logs, Fired: h.fired}
	h.writes, h.timerOps, h.touched, h.outputs, h.logs, h.fired = nil, nil, nil, nil, nil, nil
	return res
}

func (h *Host) commit(key, name string, v []byte) {
	m := h.state[key]
	if v == nil {
		delete(m, name)
		if len(m) == 0 {
			delete(h.state, key)
		}
		return
	}
	if m == nil {
		m = map[string][]byte{}
		h.state[key] = m
	}
	m[name] = v
}

// SetState sets a committed state entry, e.g. to start a test from existing state. The entry
// counts as written by the module under test: a key without a recorded state version gets the
// module's (wasmstream.SetStateVersion); use Host.SetStateVersion to make it older.
func (h *Host) SetState(key, name string, value []byte) {
	h.commit(key, name, append([]byte{}, value...))
	if _, ok := h.versions[key]; !ok {
		h.versions[key] = h.moduleVersion()
	}
}

// State returns the committed state sorted by key then name (bytewise). Values are copies.
func (h *Host) State() []StateEntry {
	var out []StateEntry
	for key, names := range h.state {
		for name, v := range names {
			out = append(out, StateEntry{Key: []byte(key), Name: name, Value: append([]byte{}, v...)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if c := bytes.Compare(out[i].Key, out[j].Key); c != 0 {
			return c < 0
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// inCall reports whether a handler call with a scope is running (not init, not between calls).
func (h *Host) inCall() bool { return h.phase != phaseIdle && h.phase != phaseInit }

// access checks the phase and scope of a state or timer call.
func (h *Host) access(key []byte) int32 {
	if !h.inCall() {
		return int32(abi.ErrNotAllowed)
	}
	if _, ok := h.scope[string(key)]; !ok && !h.scopeAll {
		return int32(abi.ErrKeyNotInBatch)
	}
	return 0
}

// lookup reads state[key][name] as the guest sees it: this call's writes over committed state.
func (h *Host) lookup(key, name string) ([]byte, bool) {
	if v, ok := h.writes[key][name]; ok {
		return v, v != nil
	}
	v, ok := h.state[key][name]
	return v, ok
}

func (h *Host) write(key, name []byte, v []byte) {
	m := h.writes[string(key)]
	if m == nil {
		m = map[string][]byte{}
		h.writes[string(key)] = m
	}
	m[string(name)] = v
}

// StateGet implements state_get (ABI.md §4.1).
func (h *Host) StateGet(key, name, buf []byte) int32 {
	if rc := h.access(key); rc != 0 {
		return rc
	}
	v, ok := h.lookup(string(key), string(name))
	if !ok {
		return int32(abi.ErrNotFound)
	}
	if len(v) <= len(buf) {
		copy(buf, v)
	}
	return int32(len(v))
}

// StatePut implements state_put (ABI.md §4.2).
func (h *Host) StatePut(key, name, value []byte) int32 {
	if rc := h.access(key); rc != 0 {
		return rc
	}
	h.write(key, name, append([]byte{}, value...))
	return 0
}

// StateDelete implements state_delete (ABI.md §4.3).
func (h *Host) StateDelete(key, name []byte) int32 {
	if rc := h.access(key); rc != 0 {
		return rc
	}
	h.write(key, name, nil)
	return 0
}

// StateScan implements state_scan (ABI.md §4.4).
func (h *Host) StateScan(key, prefix, after []byte, fromFirst bool, buf []byte) int32 {
	if rc := h.access(key); rc != 0 {
		return rc
	}
	names := map[string]bool{}
	for name := range h.state[string(key)] {
		names[name] = true
	}
	for name := range h.writes[string(key)] {
		names[name] = true
	}
	var sorted []string
	for name := range names {
		if _, ok := h.lookup(string(key), name); !ok || !strings.HasPrefix(name, string(prefix)) {
			continue
		}
		if !fromFirst && name <= string(after) {
			continue
		}
		sorted = append(sorted, name)
	}
	sort.Strings(sorted)
	var entries []abi.ScanEntry
	size := 8
	for _, name := range sorted {
		v, _ := h.lookup(string(key), name)
		n := abi.ScanEntrySize([]byte(name), v)
		if size+n > len(buf) {
			break
		}
		size += n
		entries = append(entries, abi.ScanEntry{Name: []byte(name), Value: v})
	}
	if len(entries) == 0 && len(sorted) > 0 {
		return int32(abi.ErrBufferTooSmall)
	}
	if size > len(buf) {
		return int32(abi.ErrBufferTooSmall)
	}
	page := abi.AppendScanPage(nil, entries, len(entries) < len(sorted))
	return int32(copy(buf, page))
}

// Emit implements emit (ABI.md §4.5).
func (h *Host) Emit(output, key, value, headers []byte, ts int64) int32 {
	return h.emit(output, key, value, false, headers, ts)
}

// EmitNull implements emit with val_len -1 (ABI.md §4.5, 0.5): a null value.
func (h *Host) EmitNull(output, key, headers []byte, ts int64) int32 {
	return h.emit(output, key, nil, true, headers, ts)
}

func (h *Host) emit(output, key, value []byte, null bool, headers []byte, ts int64) int32 {
	if !h.inCall() {
		return int32(abi.ErrNotAllowed)
	}
	if len(h.opts.Outputs) > 0 && !contains(h.opts.Outputs, string(output)) {
		return int32(abi.ErrInvalid)
	}
	var hs []wasmstream.Header
	if len(headers) > 0 {
		dec, err := abi.DecodeHeaders(headers)
		if err != nil {
			return int32(abi.ErrInvalid)
		}
		for _, hd := range dec {
			hs = append(hs, wasmstream.Header{Name: append([]byte{}, hd.Name...), Value: append([]byte{}, hd.Value...)})
		}
	}
	o := Output{Name: string(output), Key: append([]byte{}, key...),
		Value: append([]byte{}, value...), Headers: hs, Timestamp: ts}
	if null {
		o.Value, o.ValueNull = nil, true
	}
	h.outputs = append(h.outputs, o)
	return 0
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Log implements log (ABI.md §4.6).
func (h *Host) Log(level int32, msg []byte) int32 {
	if level < abi.LevelDebug || level > abi.LevelError {
		return int32(abi.ErrInvalid)
	}
	h.logs = append(h.logs, LogLine{Level: wasmstream.Level(level), Msg: string(msg)})
	return 0
}

// NowMs implements now_ms (ABI.md §4.7).
func (h *Host) NowMs() int64 { return h.now }

// ConfigGet implements config_get (ABI.md §4.8).
func (h *Host) ConfigGet(buf []byte) int32 {
	if len(h.opts.Config) <= len(buf) {
		copy(buf, h.opts.Config)
	}
	return int32(len(h.opts.Config))
}

// Fail implements fail (ABI.md §4.9).
func (h *Host) Fail(msg []byte) int32 {
	h.reason = append(h.reason[:0], msg...)
	return 0
}

// FailPermanent implements fail_permanent (ABI.md §4.22): fail, and the call fails permanently.
func (h *Host) FailPermanent(msg []byte) int32 {
	h.reason = append(h.reason[:0], msg...)
	h.permanent = true
	return 0
}
