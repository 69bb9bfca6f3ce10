//go:build wasip1

package host

import "unsafe"

//go:wasmimport wasmstream_v0 state_get
func stateGet(keyPtr unsafe.Pointer, keyLen int32, namePtr unsafe.Pointer, nameLen int32, bufPtr unsafe.Pointer, bufCap int32) int32

//go:wasmimport wasmstream_v0 state_put
func statePut(keyPtr unsafe.Pointer, keyLen int32, namePtr unsafe.Pointer, nameLen int32, valPtr unsafe.Pointer, valLen int32) int32

//go:wasmimport wasmstream_v0 state_delete
func stateDelete(keyPtr unsafe.Pointer, keyLen int32, namePtr unsafe.Pointer, nameLen int32) int32

//go:wasmimport wasmstream_v0 state_scan
func stateScan(keyPtr unsafe.Pointer, keyLen int32, prefixPtr unsafe.Pointer, prefixLen int32, afterPtr unsafe.Pointer, afterLen int32, bufPtr unsafe.Pointer, bufCap int32) int32

//go:wasmimport wasmstream_v0 emit
func emit(outPtr unsafe.Pointer, outLen int32, keyPtr unsafe.Pointer, keyLen int32, valPtr unsafe.Pointer, valLen int32, hdrPtr unsafe.Pointer, hdrLen int32, ts int64) int32

//go:wasmimport wasmstream_v0 log
func log(level int32, msgPtr unsafe.Pointer, msgLen int32) int32

//go:wasmimport wasmstream_v0 now_ms
func nowMs() int64

//go:wasmimport wasmstream_v0 config_get
func configGet(bufPtr unsafe.Pointer, bufCap int32) int32

//go:wasmimport wasmstream_v0 fail
func fail(msgPtr unsafe.Pointer, msgLen int32) int32

//go:wasmimport wasmstream_v0 timer_set
func timerSet(keyPtr unsafe.Pointer, keyLen int32, namePtr unsafe.Pointer, nameLen int32, domain int32, time int64, payloadPtr unsafe.Pointer, payloadLen int32) int32

//go:wasmimport wasmstream_v0 timer_delete
func timerDelete(keyPtr unsafe.Pointer, keyLen int32, namePtr unsafe.Pointer, nameLen int32) int32

//go:wasmimport wasmstream_v0 watermark_ms
func watermarkMs() int64

//go:wasmimport wasmstream_v0 state_keys
func stateKeys(afterPtr unsafe.Pointer, afterLen int32, bufPtr unsafe.Pointer, bufCap int32) int32

//go:wasmimport wasmstream_v0 http_request
func httpRequest(reqPtr unsafe.Pointer, reqLen int32, bufPtr unsafe.Pointer, bufCap int32) int32

//go:wasmimport wasmstream_v0 http_response
func httpResponse(bufPtr unsafe.Pointer, bufCap int32) int32

//go:wasmimport wasmstream_v0 metric_declare
func metricDeclare(kind int32, namePtr unsafe.Pointer, nameLen int32, labelsPtr unsafe.Pointer, labelsLen int32) int32

//go:wasmimport wasmstream_v0 metric_add
func metricAdd(id int32, v int64) int32

//go:wasmimport wasmstream_v0 metric_set
func metricSet(id int32, v int64) int32

//go:wasmimport wasmstream_v0 metric_declare_histogram
func metricDeclareHistogram(namePtr unsafe.Pointer, nameLen int32, labelsPtr unsafe.Pointer, labelsLen int32, boundsPtr unsafe.Pointer, boundsLen int32) int32

//go:wasmimport wasmstream_v0 metric_observe
func metricObserve(id int32, v float64) int32

//go:wasmimport wasmstream_v0 fail_permanent
func failPermanent(msgPtr unsafe.Pointer, msgLen int32) int32

// ptr is the address of b's first element, or nil for a nil slice.
func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// StateGet calls state_get (ABI.md §4.1); len(buf) is buf_cap.
func StateGet(key, name, buf []byte) int32 {
	return stateGet(ptr(key), int32(len(key)), ptr(name), int32(len(name)), ptr(buf), int32(len(buf)))
}

// StatePut calls state_put (ABI.md §4.2).
func StatePut(key, name, value []byte) int32 {
	return statePut(ptr(key), int32(len(key)), ptr(name), int32(len(name)), ptr(value), int32(len(value)))
}

// StateDelete calls state_delete (ABI.md §4.3).
func StateDelete(key, name []byte) int32 {
	return stateDelete(ptr(key), int32(len(key)), ptr(name), int32(len(name)))
}

// StateScan calls state_scan (ABI.md §4.4). fromFirst passes after_len = -1 and ignores after;
// len(buf) is buf_cap.
func StateScan(key, prefix, after []byte, fromFirst bool, buf []byte) int32 {
	afterLen := int32(len(after))
	if fromFirst {
		afterLen = -1
	}
	return stateScan(ptr(key), int32(len(key)), ptr(prefix), int32(len(prefix)), ptr(after), afterLen, ptr(buf), int32(len(buf)))
}

// Emit calls emit (ABI.md §4.5); an empty headers passes hdr_len = 0 (no headers).
func Emit(output, key, value, headers []byte, ts int64) int32 {
	return emit(ptr(output), int32(len(output)), ptr(key), int32(len(key)), ptr(value), int32(len(value)), ptr(headers), int32(len(headers)), ts)
}

// EmitNull calls emit (ABI.md §4.5) for an output with a null value: val_len -1 (0.5).
func EmitNull(output, key, headers []byte, ts int64) int32 {
	return emit(ptr(output), int32(len(output)), ptr(key), int32(len(key)), nil, -1, ptr(headers), int32(len(headers)), ts)
}

// Log calls log (ABI.md §4.6).
func Log(level int32, msg []byte) int32 { return log(level, ptr(msg), int32(len(msg))) }

// NowMs calls now_ms (ABI.md §4.7).
func NowMs() int64 { return nowMs() }

// ConfigGet calls config_get (ABI.md §4.8); len(buf) is buf_cap.
func ConfigGet(buf []byte) int32 { return configGet(ptr(buf), int32(len(buf))) }

// Fail calls fail (ABI.md §4.9).
func Fail(msg []byte) int32 { return fail(ptr(msg), int32(len(msg))) }

// FailPermanent calls fail_permanent (ABI.md §4.22).
func FailPermanent(msg []byte) int32 { return failPermanent(ptr(msg), int32(len(msg))) }

// TimerSet calls timer_set (ABI.md §4.10).
func TimerSet(key, name []byte, domain int32, time int64, payload []byte) int32 {
	return timerSet(ptr(key), int32(len(key)), ptr(name), int32(len(name)), domain, time, ptr(payload), int32(len(payload)))
}

// TimerDelete calls timer_delete (ABI.md §4.11).
func TimerDelete(key, name []byte) int32 {
	return timerDelete(ptr(key), int32(len(key)), ptr(name), int32(len(name)))
}

// WatermarkMs calls watermark_ms (ABI.md §4.12).
func WatermarkMs() int64 { return watermarkMs() }

// StateKeys calls state_keys (ABI.md §4.13). fromFirst passes after_len = -1 and ignores after;
// len(buf) is buf_cap.
func StateKeys(after []byte, fromFirst bool, buf []byte) int32 {
	afterLen := int32(len(after))
	if fromFirst {
		afterLen = -1
	}
	return stateKeys(ptr(after), afterLen, ptr(buf), int32(len(buf)))
}

// HTTPRequest calls http_request (ABI.md §4.14); len(buf) is buf_cap.
func HTTPRequest(req, buf []byte) int32 {
	return httpRequest(ptr(req), int32(len(req)), ptr(buf), int32(len(buf)))
}

// HTTPResponse calls http_response (ABI.md §4.15); len(buf) is buf_cap.
func HTTPResponse(buf []byte) int32 { return httpResponse(ptr(buf), int32(len(buf))) }

// MetricDeclare calls metric_declare (ABI.md §4.17); labels is a Headers layout.
func MetricDeclare(kind int32, name, labels []byte) int32 {
	return metricDeclare(kind, ptr(name), int32(len(name)), ptr(labels), int32(len(labels)))
}

// MetricAdd calls metric_add (ABI.md §4.18).
func MetricAdd(id int32, v int64) int32 { return metricAdd(id, v) }

// MetricSet calls metric_set (ABI.md §4.19).
func MetricSet(id int32, v int64) int32 { return metricSet(id, v) }

// MetricDeclareHistogram calls metric_declare_histogram (ABI.md §4.20); labels is a Headers
// layout, bounds little-endian f64s.
func MetricDeclareHistogram(name, labels, bounds []byte) int32 {
	return metricDeclareHistogram(ptr(name), int32(len(name)), ptr(labels), int32(len(labels)), ptr(bounds), int32(len(bounds)))
}

// MetricObserve calls metric_observe (ABI.md §4.21).
func MetricObserve(id int32, v float64) int32 { return metricObserve(id, v) }
