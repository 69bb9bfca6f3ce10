package abi

// ModuleName is the import module every wasmstream host function lives in.
const ModuleName = "wasmstream_v0"

// Version is the ABI version this package describes: major << 16 | minor.
const (
	VersionMajor = 0
	VersionMinor = 1
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
)

// HostFuncs lists every host function name of this ABI version.
var HostFuncs = []string{
	FuncStateGet, FuncStatePut, FuncStateDelete, FuncStateScan,
	FuncEmit, FuncLog, FuncNowMs, FuncConfigGet, FuncFail,
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
)

var errnoNames = [...]string{
	"OK", "ERR_NOT_FOUND", "ERR_OUT_OF_BOUNDS", "ERR_KEY_NOT_IN_BATCH", "ERR_TOO_LARGE",
	"ERR_INVALID", "ERR_NOT_ALLOWED", "ERR_LIMIT", "ERR_BUFFER_TOO_SMALL", "ERR_INTERNAL",
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
)

// Record flags.
const (
	FlagLate uint32 = 1 << 0
)

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
