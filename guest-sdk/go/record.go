package wasmstream

import (
	"unsafe"

	"github.com/wasmstream/wasmstream/abi"
)

// Header is a record or output header. In a Record its fields are views into the batch.
type Header = abi.Header

// Record is one input record, handed to the handler registered with Handle.
//
// Every byte slice a Record returns is a view into the batch the host wrote into guest memory:
// it is valid only until the handler returns and must not be modified. Copy what you keep. The
// *Record itself is reused for the next record.
type Record struct {
	r *abi.Record
}

// Key returns the record key (a view). The key is the scope of State: see Record.State.
//
// A record without a key (a Kafka record whose key is null) has the key NullKey, which is not
// the empty key: its state is apart from the state of key "", and an output emitted with
// NullKey as its key leaves with a null key. So passing Key() on (to Emit, StateOf, SetTimer)
// keeps a null key null. KeyNull tells such a record apart.
func (r *Record) Key() []byte { return r.r.Key }

// KeyNull reports whether the record's key is null (ABI 0.4, record flag bit 1): a Kafka record
// sent without a key. Its Key is then NullKey.
func (r *Record) KeyNull() bool { return r.r.Flags&abi.FlagKeyNull != 0 }

// NullKey is the key of a record without a key, and the key to emit for an output with a null
// key (ABI.md §6.2). Its bytes (ff 6e 75 6c 6c ff) are not UTF-8, so no key read from a JSON
// line can be them, and the host refuses a Kafka record whose key is these bytes.
const NullKey = abi.NullKey

// IsNullKey reports whether key is NullKey: for a timer firing's or a tick's key, which carry no
// flag.
func IsNullKey(key []byte) bool { return abi.IsNullKey(key) }

// Value returns the record value (a view). A null value (ValueNull) is empty.
func (r *Record) Value() []byte { return r.r.Value }

// ValueNull reports whether the record's value is null (ABI 0.5, record flag bit 2): a Kafka
// tombstone, which on a compacted topic deletes its key, as distinct from an empty value. Its
// Value is then empty. A file input's record has one when its JSON line's value field is null
// ("value":null); a chained task's record when the upstream emitted a tombstone (EmitTombstone).
func (r *Record) ValueNull() bool { return r.r.Flags&abi.FlagValueNull != 0 }

// Source returns the input name: the file input name or the Kafka topic (a copy).
func (r *Record) Source() string { return string(r.r.Source) }

// Partition returns the partition of the source (0 for a file).
func (r *Record) Partition() uint32 { return r.r.Partition }

// Offset returns the position of the record in its partition (the line number for a file).
func (r *Record) Offset() int64 { return r.r.Offset }

// Timestamp returns the event time in ms since the Unix epoch, or -1 when unknown.
func (r *Record) Timestamp() int64 { return r.r.Timestamp }

// Late reports whether the record's timestamp was below its partition's watermark when the host
// read it (ABI 0.2, flag bit 0; always false from a 0.1 host).
func (r *Record) Late() bool { return r.r.Flags&abi.FlagLate != 0 }

// Header returns the value of the first header named name (a view) and whether there is one.
func (r *Record) Header(name string) ([]byte, bool) {
	for _, h := range r.r.Headers {
		if string(h.Name) == name {
			return h.Value, true
		}
	}
	return nil, false
}

// Headers returns the record's headers in order. The slice and its contents are views, valid
// only until the handler returns.
func (r *Record) Headers() []Header { return r.r.Headers }

// State returns the state of the record's key.
func (r *Record) State() State { return State{key: r.r.Key} }

// strBytes is a read-only byte view of s, for passing to the host without a copy.
func strBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
