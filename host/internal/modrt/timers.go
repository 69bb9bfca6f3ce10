package modrt

import (
	"bytes"
	"slices"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/store"
)

// TimerOp is one timer_set (Delete false) or timer_delete (Delete true) of a call.
type TimerOp struct {
	Key, Name []byte
	Delete    bool
	Domain    int32 // abi.DomainProcessing or abi.DomainEvent
	Due       int64 // ms since the epoch
	Payload   []byte
}

// timerScope checks that timer functions are allowed for key and returns the scope entry.
func (i *Instance) timerScope(key []byte) (*scopeKey, abi.Errno) {
	if i.fnOnTimer == nil {
		return nil, abi.ErrNotAllowed
	}
	return i.stateScope(key)
}

// timerSet serves timer_set (ABI.md §4.10).
func (i *Instance) timerSet(keyPtr, keyLen, namePtr, nameLen, domain uint32, due int64, payPtr, payLen uint32) int64 {
	key, ok1 := i.view(keyPtr, keyLen)
	name, ok2 := i.view(namePtr, nameLen)
	pay, ok3 := i.view(payPtr, payLen)
	if !ok1 || !ok2 || !ok3 {
		return int64(abi.ErrOutOfBounds)
	}
	sk, e := i.timerScope(key)
	if e != abi.OK {
		return int64(e)
	}
	d := int32(domain)
	if d != abi.DomainProcessing && d != abi.DomainEvent {
		return int64(abi.ErrInvalid)
	}
	if len(key)+len(name) > store.TimerKeyRoom(i.task) {
		return int64(i.chargeState(sk, name, len(pay), true, 0)) // fails the call
	}
	if len(name) > i.lim.MaxNameBytes || len(pay) > i.lim.MaxValueBytes {
		return int64(abi.ErrTooLarge)
	}
	if e := i.reserveTimer(key, name); e != abi.OK {
		return int64(e)
	}
	return i.addTimerOp(sk, name, len(pay), TimerOp{Domain: d, Due: due, Payload: bytes.Clone(pay)})
}

// timerKey names a timer within a call: its key and name.
type timerKey struct{ key, name string }

// reserveTimer asks the Env's TimerGate, if it has one, whether the call may set timer name of
// key: once per (key, name) and call; a later set of the same timer in the call costs nothing.
func (i *Instance) reserveTimer(key, name []byte) abi.Errno {
	g, ok := i.env.(TimerGate)
	if !ok {
		return abi.OK
	}
	if _, ok := i.timerIDs[timerKey{string(key), string(name)}]; ok {
		return abi.OK
	}
	if len(i.writes)+len(i.timers) >= i.lim.MaxWritesPerCall {
		return abi.ErrLimit // addTimerOp refuses it: hold no room for it
	}
	fits, err := g.ReserveTimer(key, name)
	if err != nil {
		return abi.Errno(i.envFailed(err))
	}
	if !fits {
		return abi.ErrLimit
	}
	if i.timerIDs == nil {
		i.timerIDs = map[timerKey]struct{}{}
	}
	i.timerIDs[timerKey{string(key), string(name)}] = struct{}{}
	return abi.OK
}

// timerDelete serves timer_delete (ABI.md §4.11).
func (i *Instance) timerDelete(keyPtr, keyLen, namePtr, nameLen uint32) int64 {
	key, ok1 := i.view(keyPtr, keyLen)
	name, ok2 := i.view(namePtr, nameLen)
	if !ok1 || !ok2 {
		return int64(abi.ErrOutOfBounds)
	}
	sk, e := i.timerScope(key)
	if e != abi.OK {
		return int64(e)
	}
	if len(key)+len(name) > store.TimerKeyRoom(i.task) {
		return int64(i.chargeState(sk, name, 0, true, 0)) // fails the call
	}
	if len(name) > i.lim.MaxNameBytes {
		return int64(abi.ErrTooLarge)
	}
	return i.addTimerOp(sk, name, 0, TimerOp{Delete: true})
}

// addTimerOp appends op for (sk, name); timer ops count against MaxWritesPerCall with the writes.
func (i *Instance) addTimerOp(sk *scopeKey, name []byte, n int, op TimerOp) int64 {
	if len(i.writes)+len(i.timers) >= i.lim.MaxWritesPerCall {
		return int64(abi.ErrLimit)
	}
	if e := i.chargeState(sk, name, n, true, 0); e != abi.OK {
		return int64(e)
	}
	if sk.owned == nil {
		sk.owned = append(make([]byte, 0, len(sk.key)), sk.key...)
	}
	op.Key, op.Name = sk.owned, bytes.Clone(name)
	if op.Name == nil {
		op.Name = []byte{}
	}
	i.timers = append(i.timers, op)
	return int64(abi.OK)
}

// watermark serves watermark_ms (ABI.md §4.12).
func (i *Instance) watermark() int64 {
	if i.phase != phaseProcess {
		return -1
	}
	return i.wm
}

// KeyLister is implemented by an Env that can list the keys of the call's partition, for
// state_keys during a tick. Keys come in the store's order (see store.DB.Keys): length, then bytes.
type KeyLister interface {
	StateKeys(after []byte, fromStart bool, fn func(key []byte) bool) error
}

// stateKeys serves state_keys (ABI.md §4.13): a KeyPage of the partition's keys with committed
// state, after after.
func (i *Instance) stateKeys(afterPtr, afterLen, bufPtr, bufCap uint32) int64 {
	fromStart := int32(afterLen) == -1
	var after []byte
	ok1 := true
	if !fromStart {
		after, ok1 = i.view(afterPtr, afterLen)
	}
	buf, ok2 := i.viewOut(bufPtr, bufCap)
	if !ok1 || !ok2 {
		return int64(abi.ErrOutOfBounds)
	}
	if i.phase != phaseProcess || !i.allKeys || i.stateless {
		return int64(abi.ErrNotAllowed)
	}
	if len(buf) < 8 {
		return int64(abi.ErrBufferTooSmall)
	}
	kl, _ := i.env.(KeyLister)
	off, count, full := 8, uint32(0), false
	if kl != nil {
		after = slices.Clone(after) // the view dies if the guest memory grows meanwhile (it cannot: no guest code runs)
		err := kl.StateKeys(after, fromStart, func(key []byte) bool {
			if 4+len(key) > len(buf)-off {
				full = true
				return false
			}
			putU32(buf[off:], uint32(len(key)))
			copy(buf[off+4:], key)
			off += 4 + len(key)
			count++
			return true
		})
		if err != nil {
			return i.envFailed(err)
		}
	}
	if full && count == 0 {
		return int64(abi.ErrBufferTooSmall)
	}
	putU32(buf, count)
	more := uint32(0)
	if full {
		more = 1
	}
	putU32(buf[4:], more)
	i.moved += off
	return int64(off)
}
