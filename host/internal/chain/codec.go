package chain

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/wasmstream/wasmstream/abi"
)

// entryVersion is the first byte of an encoded entry.
const entryVersion byte = 1

// ErrBadEntry wraps the failure to decode an entry of a chain log.
var ErrBadEntry = errors.New("chain: bad log entry")

// Entry is one record of a chain log: what the upstream emitted to the output.
type Entry struct {
	Key, Value []byte
	// ValueNull: the value is null (a tombstone, ABI 0.5); Value is empty.
	ValueNull bool
	Timestamp int64
	Headers   []abi.Header
}

// nullLen is the value length that encodes a null value.
const nullLen = 0xFFFFFFFF

// Encode appends e's encoding to dst: version | i64 timestamp | u32 len | key | u32 len | value
// | u32 headers | (u32 len | name | u32 len | value)*, big-endian. A null value is the length
// 0xFFFFFFFF and no bytes (a host older than ABI 0.5 reads it as a bad entry).
func Encode(dst []byte, e Entry) []byte {
	dst = append(dst, entryVersion)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.Timestamp))
	dst = appendBytes(dst, e.Key)
	if e.ValueNull {
		dst = binary.BigEndian.AppendUint32(dst, nullLen)
	} else {
		dst = appendBytes(dst, e.Value)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(e.Headers)))
	for _, h := range e.Headers {
		dst = appendBytes(dst, h.Name)
		dst = appendBytes(dst, h.Value)
	}
	return dst
}

// EncodedLen is the length of e's encoding.
func EncodedLen(e Entry) int {
	n := 1 + 8 + 4 + len(e.Key) + 4 + len(e.Value) + 4
	for _, h := range e.Headers {
		n += 8 + len(h.Name) + len(h.Value)
	}
	return n
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

// Decode decodes an entry. The result's slices are copies: b may be reused.
func Decode(b []byte) (Entry, error) {
	var e Entry
	if len(b) < 9 || b[0] != entryVersion {
		return e, fmt.Errorf("%w: %d bytes, version %v", ErrBadEntry, len(b), b[:min(1, len(b))])
	}
	e.Timestamp = int64(binary.BigEndian.Uint64(b[1:9]))
	rest := b[9:]
	var ok bool
	if e.Key, rest, ok = takeBytes(rest); !ok {
		return e, fmt.Errorf("%w: key", ErrBadEntry)
	}
	if len(rest) >= 4 && binary.BigEndian.Uint32(rest) == nullLen {
		e.Value, e.ValueNull, rest = []byte{}, true, rest[4:]
	} else if e.Value, rest, ok = takeBytes(rest); !ok {
		return e, fmt.Errorf("%w: value", ErrBadEntry)
	}
	if len(rest) < 4 {
		return e, fmt.Errorf("%w: headers", ErrBadEntry)
	}
	n := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(n) > uint64(len(rest))/8 {
		return e, fmt.Errorf("%w: %d headers in %d bytes", ErrBadEntry, n, len(rest))
	}
	for range n {
		var name, val []byte
		if name, rest, ok = takeBytes(rest); !ok {
			return e, fmt.Errorf("%w: header name", ErrBadEntry)
		}
		if val, rest, ok = takeBytes(rest); !ok {
			return e, fmt.Errorf("%w: header value", ErrBadEntry)
		}
		e.Headers = append(e.Headers, abi.Header{Name: name, Value: val})
	}
	if len(rest) != 0 {
		return e, fmt.Errorf("%w: %d bytes left over", ErrBadEntry, len(rest))
	}
	return e, nil
}

func takeBytes(b []byte) (v, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, b, false
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, b, false
	}
	return append([]byte{}, b[4:4+n]...), b[4+n:], true
}
