package abi

// ModuleName is the import module every wasmstream host function lives in.
const ModuleName = "wasmstream_v0"

// Version is the ABI version this package describes: major << 16 | minor.
const (
	VersionMajor = 0
	VersionMinor = 5
	Version      = VersionMajor<<16 | VersionMinor
)

// VersionString formats a packed ABI version as "major.minor".
func VersionString(v uint32) string {
	return utoa(v>>16) + "." + utoa(v&0xffff)
}

// Compatible reports whether a host speaking the version of this package can run a guest that
// declares version v: the same major, and a minor no newer than the host's.
func Compatible(v uint32) bool {
	return v>>16 == VersionMajor && v&0xffff <= VersionMinor
}

// Guest export names.
const (
	ExportMemory     = "memory"
	ExportABIVersion = "wasmstream_abi_version"
	ExportAlloc      = "wasmstream_alloc"
	ExportInit       = "wasmstream_init"
	ExportProcess    = "wasmstream_process"
	ExportInitialize = "_initialize"

	// Optional exports added in 0.2.
	ExportOnTimer      = "wasmstream_on_timer"
	ExportOnTick       = "wasmstream_on_tick"
	ExportStateVersion = "wasmstream_state_version"
	ExportMigrate      = "wasmstream_migrate"
)

// Host function names in ModuleName.
const (
	FuncStateGet    = "state_get"
	FuncStatePut    = "state_put"
	FuncStateDelete = "state_delete"
	FuncStateScan   = "state_scan"
	FuncEmit        = "emit"
	FuncLog         = "log"
	FuncNowMs       = "now_ms"
	FuncConfigGet   = "config_get"
	FuncFail        = "fail"

	// Added in 0.2.
	FuncTimerSet     = "timer_set"
	FuncTimerDelete  = "timer_delete"
	FuncWatermarkMs  = "watermark_ms"
	FuncStateKeys    = "state_keys"
	FuncHTTPRequest  = "http_request"
	FuncHTTPResponse = "http_response"

	// Added in 0.3.
	FuncMetricDeclare = "metric_declare"
	FuncMetricAdd     = "metric_add"
	FuncMetricSet     = "metric_set"
	// Histograms: declared with their bucket bounds, observed with f64 values.
	FuncMetricDeclareHistogram = "metric_declare_histogram"
	FuncMetricObserve          = "metric_observe"

	// Added in 0.4: fail the current call permanently (no retries).
	FuncFailPermanent = "fail_permanent"
)

// Metric kinds, the kind argument of metric_declare (0.3).
const (
	MetricCounter = 0 // a monotonic count: metric_add with a delta >= 0
	MetricGauge   = 1 // a value that goes up and down: metric_set, or metric_add with any delta
	// MetricHistogram is the kind of a series metric_declare_histogram declares (metric_declare
	// refuses it: a histogram needs its bucket bounds): metric_observe.
	MetricHistogram = 2
)

// Guest metric bounds (0.3): a module declares at most MaxMetrics series; a name or label name
// has at most MaxMetricNameBytes bytes, a label value at most MaxMetricLabelValueBytes, and a
// series at most MaxMetricLabels labels.
const (
	MaxMetrics               = 64
	MaxMetricNameBytes       = 64
	MaxMetricLabels          = 8
	MaxMetricLabelValueBytes = 128
	MaxMetricBuckets         = 32 // bucket upper bounds of a histogram, besides +Inf
)

// HostFuncs lists every host function name of this ABI version, in the order they were added.
var HostFuncs = []string{
	FuncStateGet, FuncStatePut, FuncStateDelete, FuncStateScan,
	FuncEmit, FuncLog, FuncNowMs, FuncConfigGet, FuncFail,
	FuncTimerSet, FuncTimerDelete, FuncWatermarkMs, FuncStateKeys, FuncHTTPRequest, FuncHTTPResponse,
	FuncMetricDeclare, FuncMetricAdd, FuncMetricSet, FuncMetricDeclareHistogram, FuncMetricObserve,
	FuncFailPermanent,
}

// FuncMinor gives the minor version that added each host function; a guest declaring an older
// minor may not import it.
var FuncMinor = map[string]uint32{
	FuncTimerSet: 2, FuncTimerDelete: 2, FuncWatermarkMs: 2, FuncStateKeys: 2,
	FuncHTTPRequest: 2, FuncHTTPResponse: 2,
	FuncMetricDeclare: 3, FuncMetricAdd: 3, FuncMetricSet: 3, FuncMetricDeclareHistogram: 3, FuncMetricObserve: 3,
	FuncFailPermanent: 4,
}

// Errno is a host function status: zero or positive is success, negative is an error code.
// Codes are append-only and never reused.
type Errno int32

const (
	OK                Errno = 0
	ErrNotFound       Errno = -1
	ErrOutOfBounds    Errno = -2
	ErrKeyNotInBatch  Errno = -3
	ErrTooLarge       Errno = -4
	ErrInvalid        Errno = -5
	ErrNotAllowed     Errno = -6
	ErrLimit          Errno = -7
	ErrBufferTooSmall Errno = -8
	ErrInternal       Errno = -9
	ErrUnavailable    Errno = -10 // 0.2
)

var errnoNames = [...]string{
	"OK", "ERR_NOT_FOUND", "ERR_OUT_OF_BOUNDS", "ERR_KEY_NOT_IN_BATCH", "ERR_TOO_LARGE",
	"ERR_INVALID", "ERR_NOT_ALLOWED", "ERR_LIMIT", "ERR_BUFFER_TOO_SMALL", "ERR_INTERNAL",
	"ERR_UNAVAILABLE",
}

// String returns the ABI name of the code, e.g. "ERR_NOT_FOUND".
func (e Errno) String() string {
	if e <= 0 && int(-e) < len(errnoNames) {
		return errnoNames[-e]
	}
	if e > 0 {
		return "OK(" + utoa(uint32(e)) + ")"
	}
	return "ERR_UNKNOWN(-" + utoa(uint32(-e)) + ")"
}

// Error makes an Errno usable as an error value.
func (e Errno) Error() string { return "wasmstream abi: " + e.String() }

// Log levels accepted by FuncLog.
const (
	LevelDebug = 0
	LevelInfo  = 1
	LevelWarn  = 2
	LevelError = 3
)

// Batch kinds.
const (
	BatchRecords uint32 = 1
	BatchFirings uint32 = 2 // 0.2
	BatchTick    uint32 = 3 // 0.2
	BatchMigrate uint32 = 4 // 0.2
)

// Timer domains (timer_set) and Firing flags.
const (
	DomainProcessing int32 = 0
	DomainEvent      int32 = 1

	// FiringEventTime marks a firing of an event-time timer.
	FiringEventTime uint32 = 1 << 0
)

// Record flags.
const (
	FlagLate uint32 = 1 << 0
	// FlagKeyNull (0.4) marks a record whose key is null (a Kafka record without a key, as
	// distinct from an empty key): its key bytes are NullKey.
	FlagKeyNull uint32 = 1 << 1
	// FlagValueNull (0.5) marks a record whose value is null (a Kafka tombstone, as distinct
	// from an empty value): its value bytes are empty.
	FlagValueNull uint32 = 1 << 2
)

// EmitNullValue (0.5) is the val_len a guest passes to emit for an output whose value is null
// (a tombstone: on a compacted Kafka topic it deletes the key); val_ptr is then ignored. As an
// i32 it is -1, 0xFFFFFFFF. A guest declaring 0.4 or older gets ERR_OUT_OF_BOUNDS for it, the
// error of any negative length.
const EmitNullValue int32 = -1

// NullKey (0.4) is the key by which the host and the guest name the null key: a record without a
// key (a Kafka record whose key is null) has these bytes as its key, its state is the state of
// this key, and an output emitted with this key leaves with a null key. The bytes are not UTF-8
// (keys read from JSON lines can never be them); a Kafka record whose key is these exact bytes
// is refused as malformed (dead-lettered), so no real key shares the null key's state.
const NullKey = "\xffnull\xff"

// IsNullKey reports whether key is NullKey.
func IsNullKey(key []byte) bool { return string(key) == NullKey }

func utoa(v uint32) string {
	if v == 0 {
		return "0"
	}
	var b [10]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[i:])
}
