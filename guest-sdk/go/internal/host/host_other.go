//go:build !wasip1

package host

// Host is an in-process implementation of the host functions, for native builds. Each method has
// the contract of the ABI function it is named after; slices are the guest's memory (the
// implementation copies what it keeps and writes only into buf).
type Host interface {
	StateGet(key, name, buf []byte) int32
	StatePut(key, name, value []byte) int32
	StateDelete(key, name []byte) int32
	StateScan(key, prefix, after []byte, fromFirst bool, buf []byte) int32
	Emit(output, key, value, headers []byte, ts int64) int32
	Log(level int32, msg []byte) int32
	NowMs() int64
	ConfigGet(buf []byte) int32
	Fail(msg []byte) int32

	// Added in ABI 0.2.
	TimerSet(key, name []byte, domain int32, time int64, payload []byte) int32
	TimerDelete(key, name []byte) int32
	WatermarkMs() int64
	StateKeys(after []byte, fromFirst bool, buf []byte) int32
	HTTPRequest(req, buf []byte) int32
	HTTPResponse(buf []byte) int32

	// Added in ABI 0.3.
	MetricDeclare(kind int32, name, labels []byte) int32
	MetricAdd(id int32, v int64) int32
	MetricSet(id int32, v int64) int32
	MetricDeclareHistogram(name, labels, bounds []byte) int32
	MetricObserve(id int32, v float64) int32

	// Added in ABI 0.4.
	FailPermanent(msg []byte) int32

	// Added in ABI 0.5: emit with a null value (val_len -1, a tombstone).
	EmitNull(output, key, headers []byte, ts int64) int32
}

// Current serves every host function of a native build. It is nil until a harness installs one.
var Current Host

// Exports is the guest side of a native build, the counterpart of the wasm exports of ABI.md §3.
// Alloc returns the input buffer (len == size) the caller writes a payload into; Init, Process,
// OnTimer, OnTick and Migrate then read the first n bytes of it.
type Exports struct {
	Alloc   func(size int32) []byte
	Init    func(n int32) int32
	Process func(n int32) int32

	// Added in ABI 0.2.
	OnTimer      func(n int32) int32
	OnTick       func(n int32) int32
	StateVersion func() int32
	Migrate      func(n int32) int32
}

// Guest is set by package wasmstream when it is initialized.
var Guest Exports

func current() Host {
	if Current == nil {
		panic("wasmstream: no host: outside a wasm module, run handlers through package wasmstreamtest")
	}
	return Current
}

// StateGet calls Current.StateGet.
func StateGet(key, name, buf []byte) int32 { return current().StateGet(key, name, buf) }

// StatePut calls Current.StatePut.
func StatePut(key, name, value []byte) int32 { return current().StatePut(key, name, value) }

// StateDelete calls Current.StateDelete.
func StateDelete(key, name []byte) int32 { return current().StateDelete(key, name) }

// StateScan calls Current.StateScan.
func StateScan(key, prefix, after []byte, fromFirst bool, buf []byte) int32 {
	return current().StateScan(key, prefix, after, fromFirst, buf)
}

// Emit calls Current.Emit.
func Emit(output, key, value, headers []byte, ts int64) int32 {
	return current().Emit(output, key, value, headers, ts)
}

// EmitNull calls Current.EmitNull.
func EmitNull(output, key, headers []byte, ts int64) int32 {
	return current().EmitNull(output, key, headers, ts)
}

// Log calls Current.Log.
func Log(level int32, msg []byte) int32 { return current().Log(level, msg) }

// NowMs calls Current.NowMs.
func NowMs() int64 { return current().NowMs() }

// ConfigGet calls Current.ConfigGet.
func ConfigGet(buf []byte) int32 { return current().ConfigGet(buf) }

// Fail calls Current.Fail.
func Fail(msg []byte) int32 { return current().Fail(msg) }

// FailPermanent calls Current.FailPermanent.
func FailPermanent(msg []byte) int32 { return current().FailPermanent(msg) }

// TimerSet calls Current.TimerSet.
func TimerSet(key, name []byte, domain int32, time int64, payload []byte) int32 {
	return current().TimerSet(key, name, domain, time, payload)
}

// TimerDelete calls Current.TimerDelete.
func TimerDelete(key, name []byte) int32 { return current().TimerDelete(key, name) }

// WatermarkMs calls Current.WatermarkMs.
func WatermarkMs() int64 { return current().WatermarkMs() }

// StateKeys calls Current.StateKeys.
func StateKeys(after []byte, fromFirst bool, buf []byte) int32 {
	return current().StateKeys(after, fromFirst, buf)
}

// HTTPRequest calls Current.HTTPRequest.
func HTTPRequest(req, buf []byte) int32 { return current().HTTPRequest(req, buf) }

// HTTPResponse calls Current.HTTPResponse.
func HTTPResponse(buf []byte) int32 { return current().HTTPResponse(buf) }

// MetricDeclare calls Current.MetricDeclare.
func MetricDeclare(kind int32, name, labels []byte) int32 {
	return current().MetricDeclare(kind, name, labels)
}

// MetricAdd calls Current.MetricAdd.
func MetricAdd(id int32, v int64) int32 { return current().MetricAdd(id, v) }

// MetricSet calls Current.MetricSet.
func MetricSet(id int32, v int64) int32 { return current().MetricSet(id, v) }

// MetricDeclareHistogram calls Current.MetricDeclareHistogram.
func MetricDeclareHistogram(name, labels, bounds []byte) int32 {
	return current().MetricDeclareHistogram(name, labels, bounds)
}

// MetricObserve calls Current.MetricObserve.
func MetricObserve(id int32, v float64) int32 { return current().MetricObserve(id, v) }
