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
func (r *Record) Key() []byte { return r.r.Key }

// Value returns the record value (a view).
func (r *Record) Value() []byte { return r.r.Value }

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
