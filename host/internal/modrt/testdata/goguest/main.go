// Command goguest is a standard Go (wasip1) task written against the raw ABI, without the SDK:
// for every record it counts the record's key in state name "n" and emits the value back to
// output "out" with the count as a header. The modrt tests and benchmarks build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o goguest.wasm .
package main

import (
	"unsafe"

	"github.com/wasmstream/wasmstream/abi"
)

//go:wasmimport wasmstream_v0 state_get
func stateGet(keyPtr, keyLen, namePtr, nameLen, bufPtr, bufCap uint32) int32

//go:wasmimport wasmstream_v0 state_put
func statePut(keyPtr, keyLen, namePtr, nameLen, valPtr, valLen uint32) int32

//go:wasmimport wasmstream_v0 emit
func emit(outPtr, outLen, keyPtr, keyLen, valPtr, valLen, hdrPtr, hdrLen uint32, ts int64) int32

//go:wasmimport wasmstream_v0 fail
func fail(msgPtr, msgLen uint32) int32

// payload is the buffer handed to the host by wasmstream_alloc; kept reachable here.
var payload []byte

var (
	reader  abi.BatchReader
	name    = []byte("n")
	out     = []byte("out")
	scratch [8]byte
	hdr     []byte
)

func ptr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

//go:wasmexport wasmstream_abi_version
func abiVersion() int32 { return abi.Version }

//go:wasmexport wasmstream_alloc
func alloc(n int32) int32 {
	if cap(payload) < int(n) || n == 0 {
		payload = make([]byte, max(n, 1))
	}
	payload = payload[:n]
	return int32(ptr(payload[:1]))
}

//go:wasmexport wasmstream_init
func initTask(p, n int32) int32 { return 0 }

//go:wasmexport wasmstream_process
func process(p, n int32) int32 {
	if err := reader.Reset(payload[:n]); err != nil {
		msg := []byte("bad batch")
		fail(ptr(msg), uint32(len(msg)))
		return 1
	}
	for reader.Next() {
		rec := reader.Record()
		var count uint32
		if r := stateGet(ptr(rec.Key), uint32(len(rec.Key)), ptr(name), 1, ptr(scratch[:]), 4); r == 4 {
			count = abi.U32(scratch[:])
		}
		count++
		abi.AppendU32(scratch[:0], count)
		statePut(ptr(rec.Key), uint32(len(rec.Key)), ptr(name), 1, ptr(scratch[:]), 4)
		hdr = abi.AppendHeaders(hdr[:0], []abi.Header{{Name: []byte("count"), Value: scratch[:4]}})
		emit(ptr(out), uint32(len(out)), ptr(rec.Key), uint32(len(rec.Key)), ptr(rec.Value), uint32(len(rec.Value)),
			ptr(hdr), uint32(len(hdr)), rec.Timestamp)
	}
	if reader.Err() != nil {
		return 2
	}
	return 0
}

func main() {}
