package wasmstream

import (
	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"
)

// TimestampNow as an Output timestamp asks the host to stamp the output with its processing time.
const TimestampNow int64 = -1

// Output is one record to emit.
type Output struct {
	// Name is the output, e.g. a topic mapping in the task config.
	Name string
	// Key and Value are the output record's key and value; the host copies them. A Key of
	// NullKey gives the output a null key (on Kafka; null in a file's JSON line), an empty Key
	// an empty one.
	Key, Value []byte
	// ValueNull makes the output's value null, a tombstone (ABI 0.5: on Kafka a record with a
	// null value, which on a compacted topic deletes the key; "value":null in a file's JSON
	// line); Value is then ignored. Otherwise an empty Value is an empty value, not a null one.
	ValueNull bool
	// Headers are the output headers, in order; nil or empty means none.
	Headers []Header
	// Timestamp is the event time in ms since the Unix epoch; any negative value (TimestampNow)
	// means the host's processing time. Note that the zero value is the epoch itself: pass a
	// record's Timestamp() or TimestampNow.
	Timestamp int64
}

// hdrBuf is the reusable buffer for encoding output headers.
var hdrBuf []byte

// emitTs is the timestamp Emit gives an output: the time of what the guest is handling (see Emit).
var emitTs = TimestampNow

// Emit sends key and value to the output named output, without headers. Outputs are released by
// the host in emit order, and only if the whole call succeeds.
//
// The output's timestamp follows the rule every wasmstream SDK shares: while handling a record
// it is the record's timestamp (processing time when the record has none, i.e. -1); while
// handling an event-time timer it is the firing's time; in a processing-time timer, a tick or a
// migration it is the processing time. Use EmitWith to choose another timestamp.
func Emit(output string, key, value []byte) error {
	return check(abi.FuncEmit, host.Emit(strBytes(output), key, value, nil, emitTs))
}

// EmitTombstone sends a record with key and a null value to the output named output, without
// headers: a tombstone, which deletes key from a compacted Kafka topic (ABI 0.5). Its timestamp
// is Emit's. A null key (NullKey) cannot be deleted that way: Kafka's compaction keeps no record
// without a key. To send headers or choose the timestamp, use EmitWith with ValueNull.
func EmitTombstone(output string, key []byte) error {
	return check(abi.FuncEmit, host.EmitNull(strBytes(output), key, nil, emitTs))
}

// EmitWith sends o. Outputs are released by the host in emit order, and only if the whole batch
// succeeds.
func EmitWith(o Output) error {
	var hdr []byte
	if len(o.Headers) > 0 {
		hdrBuf = abi.AppendHeaders(hdrBuf[:0], o.Headers)
		hdr = hdrBuf
	}
	if o.ValueNull {
		return check(abi.FuncEmit, host.EmitNull(strBytes(o.Name), o.Key, hdr, o.Timestamp))
	}
	return check(abi.FuncEmit, host.Emit(strBytes(o.Name), o.Key, o.Value, hdr, o.Timestamp))
}

// Level is a log level.
type Level int32

// Log levels (ABI.md §4.6).
const (
	LevelDebug Level = abi.LevelDebug
	LevelInfo  Level = abi.LevelInfo
	LevelWarn  Level = abi.LevelWarn
	LevelError Level = abi.LevelError
)

// Log writes msg to the host's log, tagged with the task. The host truncates over-long messages.
// Log works in init, in handlers and at package initialization; it never fails the batch (an
// invalid level is dropped by the host).
func Log(level Level, msg string) { host.Log(int32(level), strBytes(msg)) }

// Debug logs msg at LevelDebug.
func Debug(msg string) { Log(LevelDebug, msg) }

// Info logs msg at LevelInfo.
func Info(msg string) { Log(LevelInfo, msg) }

// Warn logs msg at LevelWarn.
func Warn(msg string) { Log(LevelWarn, msg) }

// Error logs msg at LevelError.
func Error(msg string) { Log(LevelError, msg) }

// NowMs returns the host's processing time in ms since the Unix epoch. It is the guest's only
// clock: the sandbox's own clock (time.Now) does not tell real time.
func NowMs() int64 { return host.NowMs() }

// config is a copy of the task config made when the host called init.
var config []byte

// Config returns the task configuration: a JSON object ("{}" when the task has none). The slice is
// shared; do not modify it. Before init (e.g. in a Go init function) it asks the host.
func Config() []byte {
	if config != nil {
		return config
	}
	var buf []byte
	n := host.ConfigGet(buf)
	for n > int32(len(buf)) {
		buf = make([]byte, n)
		n = host.ConfigGet(buf)
	}
	if n < 0 {
		return nil
	}
	return buf[:n]
}
