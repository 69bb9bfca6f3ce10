//go:build wasip1

package wasmstream

import (
	"unsafe"

	"github.com/wasmstream/wasmstream/abi"
)

// The guest exports of ABI.md §3. Go's wasip1 c-shared build (and TinyGo's) adds memory and
// _initialize.

//go:wasmexport wasmstream_abi_version
func wasmstreamABIVersion() int32 { return abi.Version }

//go:wasmexport wasmstream_alloc
func wasmstreamAlloc(size int32) int32 {
	b := alloc(size)
	if b == nil {
		return 0
	}
	return int32(addr(b))
}

//go:wasmexport wasmstream_init
func wasmstreamInit(ptr uint32, n int32) int32 {
	if !inInBuf(ptr) {
		return fail("wasmstream: init payload is not in the buffer wasmstream_alloc returned")
	}
	return callInit(n)
}

//go:wasmexport wasmstream_process
func wasmstreamProcess(ptr uint32, n int32) int32 {
	if !inInBuf(ptr) {
		return fail("wasmstream: batch payload is not in the buffer wasmstream_alloc returned")
	}
	return callProcess(n)
}

//go:wasmexport wasmstream_on_timer
func wasmstreamOnTimer(ptr uint32, n int32) int32 {
	if !inInBuf(ptr) {
		return fail("wasmstream: firings payload is not in the buffer wasmstream_alloc returned")
	}
	return callOnTimer(n)
}

//go:wasmexport wasmstream_on_tick
func wasmstreamOnTick(ptr uint32, n int32) int32 {
	if !inInBuf(ptr) {
		return fail("wasmstream: tick payload is not in the buffer wasmstream_alloc returned")
	}
	return callOnTick(n)
}

//go:wasmexport wasmstream_state_version
func wasmstreamStateVersion() int32 { return callStateVersion() }

//go:wasmexport wasmstream_migrate
func wasmstreamMigrate(ptr uint32, n int32) int32 {
	if !inInBuf(ptr) {
		return fail("wasmstream: migrate payload is not in the buffer wasmstream_alloc returned")
	}
	return callMigrate(n)
}

// inInBuf reports whether ptr is the start of the buffer wasmstream_alloc last returned: the host
// must write the payload exactly there (ABI.md §3).
func inInBuf(ptr uint32) bool {
	return cap(inBuf) > 0 && ptr == addr(inBuf)
}

// addr is the address of b's first element in linear memory (wasm32: it fits in 32 bits).
func addr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
