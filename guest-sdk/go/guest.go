package wasmstream

import (
	"strconv"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"
)

var (
	initFn    func(cfg []byte) error
	processFn func(r *Record) error
)

// HandleInit registers fn to run once per module instance, before any record, with the task
// configuration (a JSON object; the same bytes Config returns). If fn returns an error, the
// instance fails to start and the host reports the error. State and Emit are not allowed during
// init (they return ErrNotAllowed). Registering is optional; a later call replaces fn.
func HandleInit(fn func(cfg []byte) error) { initFn = fn }

// Handle registers fn as the record handler. It is called once per record, in batch order;
// records of one key come in order, records of different keys are independent.
//
// If fn returns an error, the SDK reports it to the host (with the record's source, partition and
// offset) and the whole batch fails: none of its state writes or outputs take effect, and the host
// retries or stops according to the task's policy. An error wrapped with Permanent is not retried:
// the record goes to the dead letters at once (ABI 0.4). If fn panics, the module traps: the batch
// fails the same way and the host discards this module instance (package variables included) and
// starts a fresh one. A later call replaces fn.
func Handle(fn func(r *Record) error) { processFn = fn }

// inBuf is the single input buffer wasmstream_alloc hands out; the package variable keeps it
// alive. The host writes each Init or Batch payload into it (ABI.md §3).
var inBuf []byte

const inBufMax = 1 << 30

// alloc returns inBuf resized to size bytes, growing it when needed, or nil for an invalid size.
func alloc(size int32) []byte {
	if size < 0 || size > inBufMax {
		return nil
	}
	if int(size) > cap(inBuf) || cap(inBuf) == 0 {
		c := 2 * cap(inBuf)
		if c < int(size) {
			c = int(size)
		}
		if c < 1024 {
			c = 1024
		}
		inBuf = make([]byte, c)
	}
	inBuf = inBuf[:size]
	return inBuf
}

// fail reports msg to the host and returns the non-zero status of a failed call.
func fail(msg string) int32 {
	host.Fail(strBytes(msg))
	return 1
}

// failErr is fail for a handler's error err: when err is permanent (Permanent) the host is told
// with fail_permanent, and does not retry the call.
func failErr(msg string, err error) int32 {
	if IsPermanent(err) {
		host.FailPermanent(strBytes(msg))
		return 1
	}
	return fail(msg)
}

// callInit handles wasmstream_init on the first n bytes of inBuf.
func callInit(n int32) int32 {
	if n < 0 || int(n) > len(inBuf) {
		return fail("wasmstream: init payload is not in the buffer wasmstream_alloc returned")
	}
	in, err := abi.DecodeInit(inBuf[:n])
	if err != nil {
		return fail("wasmstream: init: " + err.Error())
	}
	config = append(make([]byte, 0, len(in.Config)), in.Config...)
	if in.Version&0xffff >= 3 { // a 0.2 host has no metric functions: metrics stay undeclared no-ops
		if err := declareMetrics(); err != nil {
			return fail("wasmstream: " + err.Error())
		}
		inInit = true
		defer func() { inInit = false }()
	}
	if initFn != nil {
		if err := initFn(config); err != nil {
			return fail(err.Error())
		}
	}
	return 0
}

var (
	batch  abi.BatchReader
	record Record
)

// callProcess handles wasmstream_process on the first n bytes of inBuf.
func callProcess(n int32) int32 {
	if n < 0 || int(n) > len(inBuf) {
		return fail("wasmstream: batch payload is not in the buffer wasmstream_alloc returned")
	}
	if processFn == nil {
		return fail("wasmstream: no record handler: call wasmstream.Handle in an init function")
	}
	if err := batch.Reset(inBuf[:n]); err != nil {
		return fail("wasmstream: batch: " + err.Error())
	}
	record.r = batch.Record() // the same record every time, decoded anew by each Next
	for batch.Next() {
		emitTs = record.r.Timestamp
		err := processFn(&record)
		emitTs = TimestampNow
		if err != nil {
			r := record.r
			return failErr("wasmstream: record "+string(r.Source)+"/"+
				strconv.FormatUint(uint64(r.Partition), 10)+"@"+
				strconv.FormatInt(r.Offset, 10)+": "+err.Error(), err)
		}
	}
	record.r = nil
	if err := batch.Err(); err != nil {
		return fail("wasmstream: batch: " + err.Error())
	}
	return 0
}
