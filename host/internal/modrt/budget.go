package modrt

import (
	"fmt"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/store"
)

// The per-call budgets and the store's limits, checked by the host functions that write (ABI.md
// "Limits"). Going over one returns an error code to the guest and fails the call whatever the
// guest does next (overErr): a write or an output the host refused is never lost silently.

// over records why the call fails (the first reason wins) and returns code for the guest.
func (i *Instance) over(code abi.Errno, format string, args ...any) int64 {
	if i.overErr == nil {
		i.overErr = fmt.Errorf("%w: "+format, append([]any{ErrOverLimit}, args...)...)
	}
	return int64(code)
}

// chargeEmit counts n emitted bytes against Limits.MaxEmitBytesPerCall.
func (i *Instance) chargeEmit(n int) abi.Errno {
	if i.emitN+n > i.lim.MaxEmitBytesPerCall {
		return abi.Errno(i.over(abi.ErrLimit, "the call emitted more than its budget of %d bytes (max_emit_bytes_per_call)",
			i.lim.MaxEmitBytesPerCall))
	}
	i.emitN += n
	return abi.OK
}

// chargeState checks a state write or timer operation of key and name, n bytes of value or
// payload, against the store's limits and the call's budgets, and counts it. replaced is the
// store cost of the same name's earlier write in this call (0 if none), which this one replaces in
// the key's transaction.
func (i *Instance) chargeState(sk *scopeKey, name []byte, n int, timer bool, replaced int) abi.Errno {
	key := sk.key
	room, what := store.StateKeyRoom(i.task), "state name"
	if timer {
		room, what = store.TimerKeyRoom(i.task), "timer name"
	}
	if len(key)+len(name) > room {
		return abi.Errno(i.over(abi.ErrTooLarge, "%s of %d bytes with a key of %d bytes: over the store's limit of %d bytes for key and name together in this task",
			what, len(name), len(key), room))
	}
	if i.stateN+len(name)+n > i.lim.MaxStateBytesPerCall {
		return abi.Errno(i.over(abi.ErrLimit, "the call wrote more than its budget of %d state bytes (max_state_bytes_per_call)",
			i.lim.MaxStateBytesPerCall))
	}
	var entries, bytes int
	if timer {
		entries, bytes = store.TimerOpCost(i.task, key, name, n)
	} else {
		entries, bytes = store.StateWriteCost(i.task, key, name, n)
	}
	if replaced > 0 {
		entries = 0 // the same name again: one entry in the transaction
		bytes -= replaced
	}
	if sk.txnEntries == 0 {
		sk.txnEntries, sk.txnBytes = store.MarkCost(i.task, key)
	}
	if sk.txnEntries+entries > i.lim.KeyTxnEntries || sk.txnBytes+bytes > i.lim.KeyTxnBytes {
		return abi.Errno(i.over(abi.ErrLimit, "the writes of key %q in this call are more than one store transaction holds (%d entries, %d bytes): write fewer or smaller state entries per key per call",
			shortKey(key), i.lim.KeyTxnEntries, i.lim.KeyTxnBytes))
	}
	sk.txnEntries += entries
	sk.txnBytes += bytes
	i.stateN += len(name) + n
	return abi.OK
}

// shortKey cuts a key for an error message.
func shortKey(key []byte) string {
	const show = 64
	if len(key) > show {
		return fmt.Sprintf("%s... (%d bytes)", key[:show], len(key))
	}
	return string(key)
}
