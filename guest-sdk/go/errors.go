package wasmstream

import "github.com/wasmstream/wasmstream/abi"

// The sentinel errors below are the ABI error codes (ABI.md §5). Every error a host function
// reports is a *HostError that matches its sentinel with errors.Is, for example
// errors.Is(err, ErrKeyNotInBatch).
var (
	// ErrNotFound is returned when a state entry does not exist. State.Get reports a missing entry
	// as (nil, false, nil) instead, so user code rarely sees it.
	ErrNotFound error = abi.ErrNotFound
	// ErrOutOfBounds is returned when the host found a pointer/length outside guest memory (an SDK
	// bug, never expected).
	ErrOutOfBounds error = abi.ErrOutOfBounds
	// ErrKeyNotInBatch is returned when state is accessed for a key that is not in the current
	// batch (see StateOf).
	ErrKeyNotInBatch error = abi.ErrKeyNotInBatch
	// ErrTooLarge is returned when a value, name, key or output is over the task's size limit.
	ErrTooLarge error = abi.ErrTooLarge
	// ErrInvalid is returned when an argument is malformed, an output name is unknown (when the
	// task declares its outputs) or a log level is out of range.
	ErrInvalid error = abi.ErrInvalid
	// ErrNotAllowed is returned when state, timers, Emit or HTTPDo are used outside a handler (e.g.
	// during init), when Tick.Keys is used outside a tick, and when HTTPDo is not granted (no HTTP
	// grant, or a host not on the task's allowlist).
	ErrNotAllowed error = abi.ErrNotAllowed
	// ErrLimit is returned when one call makes too many state writes, timer operations or outputs.
	ErrLimit error = abi.ErrLimit
	// ErrBufferTooSmall is returned when a single state entry is too large for the SDK's biggest
	// scan buffer.
	ErrBufferTooSmall error = abi.ErrBufferTooSmall
	// ErrInternal is returned when the host failed (e.g. its storage); the handler should return
	// the error so the batch fails and is retried.
	ErrInternal error = abi.ErrInternal
	// ErrUnavailable is returned by HTTPDo when the connection failed, the request timed out or
	// the host is stopping (ABI 0.2).
	ErrUnavailable error = abi.ErrUnavailable
)

// HostError is an error a host function returned.
type HostError struct {
	// Func is the host function, e.g. "state_put".
	Func string
	// Errno is the ABI error code; Errno.String() is its ABI name, e.g. "ERR_KEY_NOT_IN_BATCH".
	Errno abi.Errno
}

// Error returns "wasmstream: <func>: <ABI name>".
func (e *HostError) Error() string { return "wasmstream: " + e.Func + ": " + e.Errno.String() }

// Unwrap returns the Errno, so errors.Is matches the sentinels above.
func (e *HostError) Unwrap() error { return e.Errno }

// check turns a host status into an error: nil for a status >= 0.
func check(fn string, rc int32) error {
	if rc >= 0 {
		return nil
	}
	return &HostError{Func: fn, Errno: abi.Errno(rc)}
}
