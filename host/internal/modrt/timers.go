package modrt

import "github.com/wasmstream/wasmstream/abi"

// timerSet serves timer_set (ABI.md §4.10).
func (i *Instance) timerSet(keyPtr, keyLen, namePtr, nameLen, domain uint32, due int64, payPtr, payLen uint32) int64 {
	return int64(abi.ErrNotAllowed)
}

// timerDelete serves timer_delete (ABI.md §4.11).
func (i *Instance) timerDelete(keyPtr, keyLen, namePtr, nameLen uint32) int64 {
	return int64(abi.ErrNotAllowed)
}

// watermark serves watermark_ms (ABI.md §4.12).
func (i *Instance) watermark() int64 { return -1 }

// stateKeys serves state_keys (ABI.md §4.13).
func (i *Instance) stateKeys(afterPtr, afterLen, bufPtr, bufCap uint32) int64 {
	return int64(abi.ErrNotAllowed)
}
