package wasmstream

import (
	"strconv"

	"github.com/wasmstream/wasmstream/abi"
)

// stateVersion is what wasmstream_state_version returns.
var stateVersion uint32

// SetStateVersion declares the version of the state format this module writes (default 0). The
// host records, with each key's state, the version of the module that last ran on it; before this
// module touches a key whose state has another version, the host calls the handler registered
// with HandleMigrate (ABI.md §4.16).
//
// Call it in a Go init function: the host may ask for the version before wasmstream_init. v must
// be below 2^31; the host refuses a module that declares a larger one.
func SetStateVersion(v uint32) { stateVersion = v }

// StateVersion returns the version set with SetStateVersion.
func StateVersion() uint32 { return stateVersion }

// Migration asks the module to convert one key's state from the format of state version From to
// that of version To (a downgrade when From > To). It is handed to the handler registered with
// HandleMigrate; the key is the call's scope.
type Migration struct {
	m abi.Migrate
}

// From returns the key's recorded state version.
func (m *Migration) From() uint32 { return m.m.From }

// To returns this module's state version (SetStateVersion).
func (m *Migration) To() uint32 { return m.m.To }

// Key returns the key to migrate (a view, valid only until the handler returns).
func (m *Migration) Key() []byte { return m.m.Key }

// Partition returns the key's partition.
func (m *Migration) Partition() uint32 { return m.m.Partition }

// State returns the state of the key to migrate.
func (m *Migration) State() State { return State{key: m.m.Key} }

var (
	migrateFn func(m *Migration) error
	migration Migration
)

// HandleMigrate registers fn as the migration handler. The host calls it before any other call
// involving a key whose state was written under another state version; fn rewrites the key's
// state (and timers) with State, SetTimer and DeleteTimer. The migration and the calls that follow
// it are one unit of work: if fn returns an error or panics, none of it takes effect and the key's
// work is retried (and eventually dead-lettered) like any failure, so a module that cannot
// downgrade should return an error naming the versions. Without a handler the module runs on the
// state as it is. A later call replaces fn.
func HandleMigrate(fn func(m *Migration) error) { migrateFn = fn }

// callMigrate handles wasmstream_migrate on the first n bytes of inBuf.
func callMigrate(n int32) int32 {
	if n < 0 || int(n) > len(inBuf) {
		return fail("wasmstream: migrate payload is not in the buffer wasmstream_alloc returned")
	}
	m, err := abi.DecodeMigrate(inBuf[:n])
	if err != nil {
		return fail("wasmstream: migrate: " + err.Error())
	}
	if migrateFn == nil {
		return 0
	}
	migration.m = m
	err = migrateFn(&migration)
	migration.m = abi.Migrate{}
	if err != nil {
		return failErr("wasmstream: migrating key "+strconv.Quote(string(m.Key))+" from state version "+
			strconv.FormatUint(uint64(m.From), 10)+" to "+strconv.FormatUint(uint64(m.To), 10)+": "+err.Error(), err)
	}
	return 0
}

// callStateVersion handles wasmstream_state_version.
func callStateVersion() int32 { return int32(stateVersion) }
