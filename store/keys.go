package store

import (
	"encoding/binary"
	"fmt"
)

// FormatVersion is the version of the on-disk layout described in the package
// documentation. Open writes it into a new store and refuses a store with a
// higher version.
const FormatVersion uint32 = 1

// Limits on names and keys.
const (
	// MaxTaskLen is the longest task name, in bytes.
	MaxTaskLen = 255
	// MaxStreamNameLen is the longest stream name, in bytes.
	MaxStreamNameLen = 4096
	// MaxStateKeyLen is the largest len(task)+len(key)+len(name) of one state
	// entry: Badger's 65000-byte key limit minus the fixed parts of the
	// state key.
	MaxStateKeyLen = maxBadgerKey - stateKeyOverhead
)

// Table tags: the first byte of every Badger key.
const (
	tableVersion  byte = 'v'
	tableTask     byte = 't'
	tableStream   byte = 'i'
	tablePosition byte = 'p'
	tableMark     byte = 'm'
	tableState    byte = 's'

	// The module registry (added in format 1 without a version bump: see the package doc).
	tableModule        byte = 'b'
	tableVersionRecord byte = 'r'
	tableActive        byte = 'a'
)

const (
	maxBadgerKey = 65000 // Badger rejects longer keys.

	taskPrefixOverhead = 1 + 2     // tag, u16 len(task)
	streamPartLen      = 4         // u32 stream
	stateKeyOverhead   = 3 + 4 + 4 // tag+u16, u32 stream, u32 len(key)
	markKeyOverhead    = 3 + 4     // tag+u16, u32 stream
	positionValueLen   = 3 * 8
	markValueLen       = 8
	u32ValueLen        = 4
)

var versionKey = []byte{tableVersion}

func validTask(task string) error {
	if len(task) == 0 || len(task) > MaxTaskLen {
		return fmt.Errorf("%w: task name of %d bytes (want 1..%d)", ErrInvalidName, len(task), MaxTaskLen)
	}
	return nil
}

func validStreamName(name string) error {
	if len(name) == 0 || len(name) > MaxStreamNameLen {
		return fmt.Errorf("%w: stream name of %d bytes (want 1..%d)", ErrInvalidName, len(name), MaxStreamNameLen)
	}
	return nil
}

// appendTaskPrefix appends tag | u16 len(task) | task.
func appendTaskPrefix(dst []byte, tag byte, task string) []byte {
	dst = append(dst, tag)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(task)))
	return append(dst, task...)
}

// appendStreamPrefix appends tag | u16 len(task) | task | u32 stream.
func appendStreamPrefix(dst []byte, tag byte, task string, stream uint32) []byte {
	dst = appendTaskPrefix(dst, tag, task)
	return binary.BigEndian.AppendUint32(dst, stream)
}

// appendStateKeyPrefix appends the state key up to and including the record
// key: 's' | u16 len(task) | task | u32 stream | u32 len(key) | key. Appending
// a name gives the full state key.
func appendStateKeyPrefix(dst []byte, task string, stream uint32, key []byte) []byte {
	dst = appendStreamPrefix(dst, tableState, task, stream)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(key)))
	return append(dst, key...)
}

// appendStateKey appends the full state key of (task, stream, key, name).
func appendStateKey(dst []byte, task string, stream uint32, key, name []byte) []byte {
	return append(appendStateKeyPrefix(dst, task, stream, key), name...)
}

func stateKeyLen(task string, key, name []byte) int {
	return stateKeyOverhead + len(task) + len(key) + len(name)
}

// decodeStateKey splits a full state key. The returned slices alias k.
func decodeStateKey(k []byte) (task string, stream uint32, key, name []byte, err error) {
	rest, task, stream, err := decodeStreamPrefix(k, tableState)
	if err != nil {
		return "", 0, nil, nil, err
	}
	if len(rest) < 4 {
		return "", 0, nil, nil, fmt.Errorf("%w: state key too short", ErrCorrupt)
	}
	n := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(n) > uint64(len(rest)) {
		return "", 0, nil, nil, fmt.Errorf("%w: state key length %d exceeds key", ErrCorrupt, n)
	}
	return task, stream, rest[:n:n], rest[n:], nil
}

// decodeTaskPrefix checks tag | u16 len(task) | task and returns the rest.
func decodeTaskPrefix(k []byte, tag byte) (rest []byte, task string, err error) {
	if len(k) < taskPrefixOverhead || k[0] != tag {
		return nil, "", fmt.Errorf("%w: key of table %q too short or mistagged", ErrCorrupt, tag)
	}
	n := int(binary.BigEndian.Uint16(k[1:]))
	k = k[taskPrefixOverhead:]
	if n > len(k) {
		return nil, "", fmt.Errorf("%w: task length %d exceeds key", ErrCorrupt, n)
	}
	return k[n:], string(k[:n]), nil
}

// decodeStreamPrefix checks tag | u16 len(task) | task | u32 stream and
// returns the rest.
func decodeStreamPrefix(k []byte, tag byte) (rest []byte, task string, stream uint32, err error) {
	rest, task, err = decodeTaskPrefix(k, tag)
	if err != nil {
		return nil, "", 0, err
	}
	if len(rest) < streamPartLen {
		return nil, "", 0, fmt.Errorf("%w: key of table %q has no stream ID", ErrCorrupt, tag)
	}
	return rest[streamPartLen:], task, binary.BigEndian.Uint32(rest), nil
}

func appendMarkKey(dst []byte, task string, stream uint32, key []byte) []byte {
	return append(appendStreamPrefix(dst, tableMark, task, stream), key...)
}

func markKeyLen(task string, key []byte) int { return markKeyOverhead + len(task) + len(key) }

func appendPositionKey(dst []byte, task string, stream uint32) []byte {
	return appendStreamPrefix(dst, tablePosition, task, stream)
}

func appendStreamKey(dst []byte, task, name string) []byte {
	return append(appendTaskPrefix(dst, tableStream, task), name...)
}

func appendTaskKey(dst []byte, task string) []byte {
	return append(append(dst, tableTask), task...)
}

func appendI64(dst []byte, v int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(v)) }

func appendPosition(dst []byte, p Position) []byte {
	dst = appendI64(dst, p.Next)
	dst = appendI64(dst, p.Horizon)
	return appendI64(dst, p.Resume)
}

func decodePosition(v []byte) (Position, error) {
	if len(v) != positionValueLen {
		return Position{}, fmt.Errorf("%w: position value of %d bytes", ErrCorrupt, len(v))
	}
	return Position{
		Next:    int64(binary.BigEndian.Uint64(v)),
		Horizon: int64(binary.BigEndian.Uint64(v[8:])),
		Resume:  int64(binary.BigEndian.Uint64(v[16:])),
	}, nil
}

func decodeMark(v []byte) (int64, error) {
	if len(v) != markValueLen {
		return 0, fmt.Errorf("%w: mark value of %d bytes", ErrCorrupt, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func decodeU32(v []byte) (uint32, error) {
	if len(v) != u32ValueLen {
		return 0, fmt.Errorf("%w: u32 value of %d bytes", ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint32(v), nil
}

// prefixEnd returns the smallest key greater than every key with prefix p, or
// nil if there is none (p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
