package modrt

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrClosed is returned when a Runtime, Module or Instance is used after Close.
var ErrClosed = errors.New("module runtime closed")

// ErrBroken is returned by Instance.Process when an earlier call trapped, exited or could not
// allocate: the guest's memory may be inconsistent (wazero does not poison an instance after a
// trap), so the instance must be closed and replaced (DESIGN S18).
var ErrBroken = errors.New("instance broken by an earlier failed call; close and replace it")

// ErrGuestFailed is the CallError.Err of a call whose export returned a non-zero status
// (the guest failed the call on purpose, usually after calling fail).
var ErrGuestFailed = errors.New("guest returned a failure status")

// ErrFailedPermanently is the CallError.Err of a call whose guest called fail_permanent (ABI
// §4.22) and did not go over a limit or meet a host failure: CallError.Permanent is set.
var ErrFailedPermanently = errors.New("guest failed the call permanently")

// ErrAllocFailed is the CallError.Err of a call whose payload could not be placed in guest
// memory: wasmstream_alloc returned 0 or a region outside memory. The instance is broken, since its
// allocator is out of memory or confused.
var ErrAllocFailed = errors.New("wasmstream_alloc failed")

// ErrBatchTooLarge is returned by Instance.Process, without calling the guest, when the
// encoded Batch cannot fit in the instance's memory limit (or in 2 GiB). Split the batch.
var ErrBatchTooLarge = errors.New("batch too large for the instance's memory limit")

// ErrOverLimit matches (errors.Is) the CallError.Err of a call that went over a per-call budget
// (Limits.MaxEmitBytesPerCall, MaxStateBytesPerCall, KeyTxnEntries, KeyTxnBytes) or tried to
// write a state or timer name the store cannot hold with its key. The guest got ERR_LIMIT or
// ERR_TOO_LARGE; the call fails whatever it returned, and fails again when retried.
var ErrOverLimit = errors.New("over a limit")

// ErrInterrupted is the CallError.Err of a call stopped at the end of a time slice because its
// Runtime was interrupted (Runtime.Interrupt: the host is stopping). The instance is broken; the
// call's work is not lost but not done: run it again on a new instance.
var ErrInterrupted = errors.New("guest call interrupted: the host is stopping")

// ErrFuelExhausted matches (errors.Is) every *FuelError: a call stopped because it spent its CPU
// budget.
var ErrFuelExhausted = errors.New("CPU budget exhausted")

// FuelError is the CallError.Err of a call that exceeded its CPU budget (Limits.FuelPerRecord,
// Limits.InitFuel). The call trapped on purpose: CallError.Trap is set and the instance is broken.
// The same call with the same inputs always stops at the same point (fuel is deterministic).
type FuelError struct {
	// Budget is the fuel the call was given.
	Budget int64
	// PerRecord and Records say how a wasmstream_process budget was made (Budget =
	// PerRecord × Records, saturating); both are 0 for a start-up call, whose budget is
	// Limits.InitFuel.
	PerRecord int64
	Records   int
}

func (e *FuelError) Error() string {
	if e.PerRecord == 0 {
		return fmt.Sprintf("call exceeded its CPU budget of %d fuel units (init_fuel=%d)", e.Budget, e.Budget)
	}
	return fmt.Sprintf("call exceeded its CPU budget of %d fuel units (fuel_per_record=%d × %d records)",
		e.Budget, e.PerRecord, e.Records)
}

// Is makes errors.Is(err, ErrFuelExhausted) true.
func (e *FuelError) Is(target error) bool { return target == ErrFuelExhausted }

// ErrCallDepth matches (errors.Is) every *CallDepthError.
var ErrCallDepth = errors.New("call depth exceeded")

// CallDepthError is the CallError.Err of a call whose nested guest calls went deeper than
// Limits.MaxCallDepth (a recursion without end, most often). The call trapped on purpose:
// CallError.Trap is set and the instance is broken. Like fuel, it is deterministic.
//
// The bound is on the runtime's own stack, which is not in the guest's linear memory: without
// it a recursing guest grows that stack to the runtime's ceiling, about 100 MiB more RSS per
// worker (170 MB of peak RSS measured for one instance). A unit is a frame of a function with
// fewer than 16 params and locals; such a frame takes 40-100 bytes of that stack.
type CallDepthError struct {
	// Limit is Limits.MaxCallDepth.
	Limit int
}

func (e *CallDepthError) Error() string {
	return fmt.Sprintf("call depth exceeded (limit %d, config key max_call_depth; a frame counts 1 plus 1 per 16 locals)", e.Limit)
}

// Is makes errors.Is(err, ErrCallDepth) true.
func (e *CallDepthError) Is(target error) bool { return target == ErrCallDepth }

// ModuleError is returned by Runtime.Compile when a module is refused: it is not a valid wasm
// binary, or it breaks the ABI contract (missing or mistyped exports, unknown imports, memory
// over the limit, an incompatible ABI version, a trap while starting up).
type ModuleError struct {
	// Problems lists everything found wrong, each a short sentence naming the export, import
	// or limit at fault, e.g. "module exports no wasmstream_process". Never empty.
	Problems []string
	// Err is the underlying cause when there is one (a decoding or trap error), else nil.
	Err error
}

// Reason is all Problems joined with "; ".
func (e *ModuleError) Reason() string { return strings.Join(e.Problems, "; ") }

func (e *ModuleError) Error() string { return "module refused: " + e.Reason() }

func (e *ModuleError) Unwrap() error { return e.Err }

func moduleErr(cause error, problems ...string) *ModuleError {
	return &ModuleError{Problems: problems, Err: cause}
}

// CallError is returned when a guest call fails: wasmstream_process or wasmstream_init returned
// non-zero, trapped, exited, could not receive its payload, or the host's Env failed during the
// call. A failed call has no effects (ABI §3).
type CallError struct {
	// Task is InstanceConfig.Task.
	Task string
	// Func is the guest export that failed, e.g. "wasmstream_process".
	Func string
	// Trap is true when the call did not return normally: a wasm trap, a WASI proc_exit, a panic
	// in a host function or in the Env. The instance is then broken (Instance.Broken), as it is
	// when the payload could not be allocated (Err is ErrAllocFailed).
	Trap bool
	// Code is the export's non-zero return status; 0 when Trap is true or the host failed.
	Code int32
	// Permanent is set when the guest called fail_permanent during the call (ABI §4.22) and the
	// call returned (did not trap): retrying it would fail the same way, so the host does not.
	Permanent bool
	// GuestMessage is what the guest passed to fail during the call, if anything (truncated to
	// Limits.MaxLogBytes).
	GuestMessage string
	// GuestStderr, for a call that trapped, is the first non-empty lines (at most 2, each cut
	// to 256 bytes, joined with " | ") the guest wrote to stderr during the call: where its
	// runtime says why it aborted, e.g. Go's "runtime: out of memory: cannot allocate …".
	// "" when none.
	GuestStderr string
	// GuestStdout, for a call that trapped, is the last non-empty lines (at most 2, each cut to
	// 256 bytes, joined with " | ") the guest wrote to stdout during the call: where TinyGo's
	// runtime prints "panic: …" before it traps. "" when none.
	GuestStdout string
	// Err is the cause: ErrGuestFailed for a non-zero status, a *FuelError when the call spent its
	// CPU budget, the runtime's trap error, ErrAllocFailed, or the error returned by the Env (the
	// call then fails even if the guest returned 0).
	Err error
}

func (e *CallError) Error() string {
	var b strings.Builder
	b.WriteString("task ")
	b.WriteString(strconv.Quote(e.Task))
	b.WriteString(": ")
	b.WriteString(e.Func)
	switch {
	case e.Trap && (errors.Is(e.Err, ErrFuelExhausted) || errors.Is(e.Err, ErrCallDepth)):
		b.WriteString(" stopped: ")
		b.WriteString(errString(e.Err))
	case e.Trap:
		b.WriteString(" trapped: ")
		b.WriteString(errString(e.Err))
	case e.Permanent && errors.Is(e.Err, ErrFailedPermanently):
		b.WriteString(" failed permanently (fail_permanent: not retried)")
	case e.Code != 0:
		b.WriteString(" returned ")
		b.WriteString(strconv.Itoa(int(e.Code)))
	default:
		b.WriteString(" failed: ")
		b.WriteString(errString(e.Err))
	}
	if e.GuestMessage != "" {
		b.WriteString("; guest says ")
		b.WriteString(strconv.Quote(e.GuestMessage))
	}
	if e.GuestStderr != "" {
		b.WriteString("; guest stderr: ")
		b.WriteString(strconv.Quote(e.GuestStderr))
	}
	if e.GuestStdout != "" {
		b.WriteString("; guest stdout: ")
		b.WriteString(strconv.Quote(e.GuestStdout))
	}
	return b.String()
}

func (e *CallError) Unwrap() error { return e.Err }

func errString(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}
