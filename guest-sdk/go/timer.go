package wasmstream

import (
	"strconv"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"
)

// Domain is the time domain of a timer (ABI.md §4.10).
type Domain int32

const (
	// ProcessingTime timers fire when the host's clock (NowMs) reaches their time.
	ProcessingTime = Domain(abi.DomainProcessing)
	// EventTime timers fire when the partition's watermark (Watermark) reaches their time.
	EventTime = Domain(abi.DomainEvent)
)

// SetTimer sets the timer name of key to fire at time at (ms since the epoch) in domain, with
// payload handed back in the Firing (nil or empty for none). A timer is identified by its
// partition, key and name: setting one that exists replaces its domain, time and payload. A time
// already past fires soon after the call succeeds.
//
// Like state writes, timer changes take effect only if the current call succeeds, and atomically
// with its state writes. key must be in the call's scope: the key of a record of the batch, of a
// firing, of a migration, or any key of the partition during a tick; any other key fails with
// ErrKeyNotInBatch. The host copies key, name and payload before SetTimer returns.
//
// Errors: ErrNotAllowed during init or in a stateless task, ErrInvalid for an unknown domain,
// ErrTooLarge for a name or payload over the task's limit, ErrLimit for too many writes and timer
// operations in one call or for a new timer while the task has time.max_pending_timers pending
// (replacing a pending timer is always allowed).
func SetTimer(key []byte, name string, domain Domain, at int64, payload []byte) error {
	return check(abi.FuncTimerSet, host.TimerSet(key, strBytes(name), int32(domain), at, payload))
}

// DeleteTimer deletes the timer name of key, in whichever domain it is; deleting a missing timer
// is not an error. It takes effect, and fails, like SetTimer.
func DeleteTimer(key []byte, name string) error {
	return check(abi.FuncTimerDelete, host.TimerDelete(key, strBytes(name)))
}

// Watermark returns the event-time watermark of the current call's partition in ms since the
// epoch: the highest record timestamp the host has read from the partition minus the task's
// allowed lateness, never decreasing. It is -1 before any timestamped record and during init.
func Watermark() int64 { return host.WatermarkMs() }

// Firing is one timer firing, handed to the handler registered with HandleTimer.
//
// Key and Payload are views into the payload the host wrote into guest memory: valid only until
// the handler returns. Copy what you keep. The *Firing itself is reused for the next firing.
type Firing struct {
	f *abi.Firing
}

// Key returns the key the timer belongs to (a view). It is in the call's scope: State and
// SetTimer accept it.
func (f *Firing) Key() []byte { return f.f.Key }

// Name returns the timer's name (a copy).
func (f *Firing) Name() string { return string(f.f.Name) }

// Time returns the time the timer was set for, in ms since the epoch.
func (f *Firing) Time() int64 { return f.f.Time }

// Payload returns the payload given to SetTimer (a view; empty when none).
func (f *Firing) Payload() []byte { return f.f.Payload }

// EventTime reports whether the timer was an event-time timer.
func (f *Firing) EventTime() bool { return f.f.Flags&abi.FiringEventTime != 0 }

// Domain returns the timer's time domain.
func (f *Firing) Domain() Domain {
	if f.EventTime() {
		return EventTime
	}
	return ProcessingTime
}

// Partition returns the partition the timer belongs to.
func (f *Firing) Partition() uint32 { return f.f.Partition }

// State returns the state of the firing's key.
func (f *Firing) State() State { return State{key: f.f.Key} }

var (
	timerFn func(f *Firing) error
	firings abi.FiringsReader
	firing  Firing
)

// HandleTimer registers fn as the timer handler. It is called once per firing; per key, firings
// come in order of time, then name. A firing's timer is deleted when the call succeeds, unless fn
// sets the same timer again (then the new setting stands).
//
// If fn returns an error or panics, the call fails like a failed batch: none of its state writes,
// timer changes or outputs take effect and the timers stay in place to fire again. The SDK always
// exports wasmstream_on_timer; a firing that arrives while no handler is registered fails the call.
// A later call replaces fn.
func HandleTimer(fn func(f *Firing) error) { timerFn = fn }

// callOnTimer handles wasmstream_on_timer on the first n bytes of inBuf.
func callOnTimer(n int32) int32 {
	if n < 0 || int(n) > len(inBuf) {
		return fail("wasmstream: firings payload is not in the buffer wasmstream_alloc returned")
	}
	if err := firings.Reset(inBuf[:n]); err != nil {
		return fail("wasmstream: firings: " + err.Error())
	}
	if firings.Len() > 0 && timerFn == nil {
		return fail("wasmstream: a timer fired but no timer handler is registered: call wasmstream.HandleTimer in an init function")
	}
	for firings.Next() {
		firing.f = firings.Firing()
		if firing.EventTime() {
			emitTs = firing.f.Time
		}
		err := timerFn(&firing)
		emitTs = TimestampNow
		if err != nil {
			f := firing.f
			return failErr("wasmstream: timer "+strconv.Quote(string(f.Name))+" of key "+
				strconv.Quote(string(f.Key))+": "+err.Error(), err)
		}
	}
	firing.f = nil
	if err := firings.Err(); err != nil {
		return fail("wasmstream: firings: " + err.Error())
	}
	return 0
}
