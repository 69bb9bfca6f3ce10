package wasmstream

import (
	"errors"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"
)

// State is the state map of one record key: State[name] = value (ABI.md §4). Reads see the writes
// made earlier in the same batch; all writes of a batch are discarded if the batch fails.
//
// The zero State is the state of the empty key.
type State struct {
	key []byte
}

// StateOf returns the state of any key. The host allows access only to keys of the current batch:
// for any other key every method returns an error matching ErrKeyNotInBatch. Prefer Record.State;
// StateOf is for handlers that deliberately touch another key of the same batch. key is used
// until the State is, so it must stay unchanged.
func StateOf(key []byte) State { return State{key: key} }

// Key returns the key this State belongs to (the slice it was made from).
func (s State) Key() []byte { return s.key }

// Reusable buffers handed to the host. They live in package variables so the garbage collector
// keeps them; the guest is single-threaded and never re-entered, so one of each is enough.
var (
	getBuf      []byte
	scanBuf     []byte
	afterBuf    []byte
	scanEntries []abi.ScanEntry
	scanning    bool
)

const (
	getBufInitial  = 256
	scanBufInitial = 4 << 10
	scanBufMax     = 64 << 20
)

// Get returns a copy of the value of name and whether it exists. A missing name is not an error.
func (s State) Get(name string) ([]byte, bool, error) { return s.GetBytes(strBytes(name)) }

// GetBytes is Get with a byte-slice name.
func (s State) GetBytes(name []byte) ([]byte, bool, error) {
	if len(getBuf) == 0 {
		getBuf = make([]byte, getBufInitial)
	}
	n := host.StateGet(s.key, name, getBuf)
	if n > int32(len(getBuf)) {
		// Too small: the host wrote nothing and told us the length; retry once.
		getBuf = make([]byte, n)
		n = host.StateGet(s.key, name, getBuf)
		if n > int32(len(getBuf)) {
			return nil, false, errors.New("wasmstream: state_get: value grew between two calls")
		}
	}
	if n == int32(abi.ErrNotFound) {
		return nil, false, nil
	}
	if err := check(abi.FuncStateGet, n); err != nil {
		return nil, false, err
	}
	v := make([]byte, n)
	copy(v, getBuf)
	return v, true, nil
}

// GetAppend appends the value of name to dst and returns the extended slice and whether the
// name exists (dst unchanged when it does not). The host writes the value straight into dst's
// spare capacity, so a handler that passes the same buffer for every record (buf[:0]) allocates
// nothing once the buffer is big enough; Get instead returns a copy of its own each time. A
// missing name is not an error.
func (s State) GetAppend(dst []byte, name string) ([]byte, bool, error) {
	room := dst[len(dst):cap(dst)]
	n := host.StateGet(s.key, strBytes(name), room)
	if n > int32(len(room)) {
		// Too small: the host wrote nothing and told us the length; retry once.
		bigger := make([]byte, len(dst), len(dst)+int(n))
		copy(bigger, dst)
		dst = bigger
		room = dst[len(dst):cap(dst)]
		n = host.StateGet(s.key, strBytes(name), room)
		if n > int32(len(room)) {
			return dst, false, errors.New("wasmstream: state_get: value grew between two calls")
		}
	}
	if n == int32(abi.ErrNotFound) {
		return dst, false, nil
	}
	if err := check(abi.FuncStateGet, n); err != nil {
		return dst, false, err
	}
	return dst[:len(dst)+int(n)], true, nil
}

// Put sets name to value. The host copies value before Put returns.
func (s State) Put(name string, value []byte) error { return s.PutBytes(strBytes(name), value) }

// PutBytes is Put with a byte-slice name.
func (s State) PutBytes(name, value []byte) error {
	return check(abi.FuncStatePut, host.StatePut(s.key, name, value))
}

// Delete removes name; removing a missing name is not an error.
func (s State) Delete(name string) error {
	return check(abi.FuncStateDelete, host.StateDelete(s.key, strBytes(name)))
}

// Scan calls fn for every name that starts with prefix, in bytewise ascending order, with its
// value, until fn returns false. name and value are views valid only during that call of fn. fn
// may read and write state (later pages see its writes) and may call Scan again.
//
// Scan fetches the names page by page (state_scan with the last name as "after"), growing its
// buffer when a single entry does not fit, up to 64 MiB per entry.
func (s State) Scan(prefix string, fn func(name, value []byte) bool) error {
	buf, entries, after := scanBuf, scanEntries, afterBuf
	if scanning {
		// A nested Scan must not overwrite the page the outer one is iterating.
		buf, entries, after = nil, nil, nil
	} else {
		scanning = true
		defer func() {
			scanBuf, scanEntries, afterBuf = buf, entries, after
			scanning = false
		}()
	}
	if len(buf) == 0 {
		buf = make([]byte, scanBufInitial)
	}
	fromFirst := true
	for {
		n := host.StateScan(s.key, strBytes(prefix), after, fromFirst, buf)
		if n == int32(abi.ErrBufferTooSmall) && len(buf) < scanBufMax {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err := check(abi.FuncStateScan, n); err != nil {
			return err
		}
		if n > int32(len(buf)) {
			return errors.New("wasmstream: state_scan: page longer than the buffer")
		}
		var more bool
		var err error
		entries, more, err = abi.DecodeScanPage(buf[:n], entries)
		if err != nil {
			return errors.New("wasmstream: state_scan: " + err.Error())
		}
		for _, e := range entries {
			if !fn(e.Name, e.Value) {
				return nil
			}
		}
		if !more {
			return nil
		}
		if len(entries) == 0 {
			return errors.New("wasmstream: state_scan: empty page with more = 1")
		}
		after = append(after[:0], entries[len(entries)-1].Name...)
		fromFirst = false
	}
}
