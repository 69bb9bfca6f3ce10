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
	// ErrLimit is returned when one call makes too many state writes, timer operations or outputs,
	// or sets a new timer while the task has as many pending as its limit allows.
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

// Permanent marks err as a permanent failure (ABI 0.4): returned from a record handler (or a
// timer, tick or migration handler), it fails the call like any error, but the host does not retry
// it: the record goes to the dead letters at once with err's text (or is skipped, or halts the
// task, as the task's retry.on_exhausted says). Use it for a record that can never succeed (it is
// malformed, it breaks a rule of the task), not for a failure that may pass (a host error, an
// unreachable service). The result wraps err: errors.Is and errors.As see through it, and
// IsPermanent finds it under other wrapping (fmt.Errorf's %w). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps (Unwrap() error), was made by Permanent.
// No reflection: TinyGo builds use it too.
func IsPermanent(err error) bool {
	for err != nil {
		if _, ok := err.(*permanentError); ok {
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// permanentError is the error Permanent returns.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

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
