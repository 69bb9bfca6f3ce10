package store

import (
	"encoding/binary"
	"fmt"
)

// FormatVersion is the version of the on-disk layout described in the package
// documentation. Open writes it into a new store and refuses a store with a
// higher version. Format 2 added the state version to the mark value, format 3
// a version record's status, format 4 the applied sets, format 5 the Kafka leader
// epoch of a position; Open upgrades an older store in place (see the package
// documentation).
const FormatVersion uint32 = 5

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
	// MaxTimerKeyLen is the largest len(task)+len(key)+len(name) of one
	// timer: Badger's 65000-byte key limit minus the fixed parts of the
	// timer's due-index key, the longer of its two keys.
	MaxTimerKeyLen = maxBadgerKey - dueKeyOverhead
	// MaxTimerDomain is the highest timer domain. The store does not
	// interpret domains; the host uses them to tell time bases apart.
	MaxTimerDomain uint8 = 1
)

// Table tags: the first byte of every Badger key.
const (
	tableVersion  byte = 'v'
	tableTask     byte = 't'
	tableStream   byte = 'i'
	tablePosition byte = 'p'
	tableMark     byte = 'm'
	tableState    byte = 's'

	// Timers (added in format 2, as adding tables is compatible: see the package doc).
	tableTimer byte = 'T'
	tableDue   byte = 'D'

	// The module registry (added in format 1 without a version bump: see the package doc).
	tableModule        byte = 'b'
	tableVersionRecord byte = 'r'
	tableActive        byte = 'a'

	// The number of the last checkpoint (added without a format change: see journal.go).
	tableCommitSeq byte = 'c'
)

const (
	maxBadgerKey = 65000 // Badger rejects longer keys.

	taskPrefixOverhead = 1 + 2     // tag, u16 len(task)
	streamPartLen      = 4         // u32 stream
	stateKeyOverhead   = 3 + 4 + 4 // tag+u16, u32 stream, u32 len(key)
	markKeyOverhead    = 3 + 4     // tag+u16, u32 stream
	positionValueLen   = 4*8 + 16
	positionValueLenV4 = positionValueLen + 8   // with the changelog epoch (written only when not 0)
	positionValueMax   = positionValueLenV4 + 4 // format 5: with the leader epoch (written only when known)
	positionValueLenV2 = 4 * 8                  // before the topic id
	positionValueLenV1 = 3 * 8                  // before the watermark
	markValueLen       = 8 + 4                  // i64 mark | u32 state version
	markValueLenV1     = 8                      // i64 mark, as format 1 wrote it
	timerKeyOverhead   = 3 + 4 + 4              // tag+u16, u32 stream, u32 len(key)
	dueKeyOverhead     = 3 + 4 + 1 + 8 + 4      // tag+u16, u32 stream, u8 domain, u64 due, u32 len(key)
	timerValueOverhead = 1 + 8                  // u8 domain | i64 due
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
	dst = appendI64(dst, p.Resume)
	dst = appendI64(dst, p.Watermark)
	dst = append(dst, p.TopicID[:]...)
	if p.Epoch != 0 || p.LeaderEpoch != 0 {
		dst = binary.BigEndian.AppendUint64(dst, p.Epoch)
	}
	if p.LeaderEpoch != 0 {
		dst = binary.BigEndian.AppendUint32(dst, uint32(p.LeaderEpoch))
	}
	return dst
}

func decodePosition(v []byte) (Position, error) {
	if len(v) != positionValueMax && len(v) != positionValueLenV4 && len(v) != positionValueLen && len(v) != positionValueLenV2 && len(v) != positionValueLenV1 {
		return Position{}, fmt.Errorf("%w: position value of %d bytes", ErrCorrupt, len(v))
	}
	p := Position{
		Next:      int64(binary.BigEndian.Uint64(v)),
		Horizon:   int64(binary.BigEndian.Uint64(v[8:])),
		Resume:    int64(binary.BigEndian.Uint64(v[16:])),
		Watermark: -1,
	}
	if len(v) >= positionValueLenV2 {
		p.Watermark = int64(binary.BigEndian.Uint64(v[24:]))
	}
	if len(v) >= positionValueLen {
		copy(p.TopicID[:], v[32:])
	}
	if len(v) >= positionValueLenV4 {
		p.Epoch = binary.BigEndian.Uint64(v[48:])
	}
	if len(v) == positionValueMax {
		p.LeaderEpoch = LeaderEpoch(binary.BigEndian.Uint32(v[56:]))
	}
	return p, nil
}

// appendMarkValue appends i64 mark | u32 state version.
func appendMarkValue(dst []byte, mark int64, stateVersion uint32) []byte {
	return binary.BigEndian.AppendUint32(appendI64(dst, mark), stateVersion)
}

// decodeMark decodes a mark value: the 12-byte value of format 2, or the
// 8-byte value of format 1, whose state version is 0.
func decodeMark(v []byte) (mark int64, stateVersion uint32, err error) {
	switch len(v) {
	case markValueLen:
		stateVersion = binary.BigEndian.Uint32(v[8:])
	case markValueLenV1:
	default:
		return 0, 0, fmt.Errorf("%w: mark value of %d bytes", ErrCorrupt, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), stateVersion, nil
}

// appendTimerKeyPrefix appends the timer key up to and including the record
// key: 'T' | u16 len(task) | task | u32 stream | u32 len(key) | key. Appending
// a name gives the full timer key.
func appendTimerKeyPrefix(dst []byte, task string, stream uint32, key []byte) []byte {
	dst = appendStreamPrefix(dst, tableTimer, task, stream)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(key)))
	return append(dst, key...)
}

func appendTimerKey(dst []byte, task string, stream uint32, key, name []byte) []byte {
	return append(appendTimerKeyPrefix(dst, task, stream, key), name...)
}

func timerKeyLen(task string, key, name []byte) int {
	return timerKeyOverhead + len(task) + len(key) + len(name)
}

// appendDuePrefix appends 'D' | u16 len(task) | task | u32 stream | u8 domain:
// the prefix of one domain's due index.
func appendDuePrefix(dst []byte, task string, stream uint32, domain uint8) []byte {
	return append(appendStreamPrefix(dst, tableDue, task, stream), domain)
}

// appendDueKey appends the due-index key of a timer: the due prefix | u64 due
// with the sign bit flipped (so that negative times sort first) | u32 len(key)
// | key | name.
func appendDueKey(dst []byte, task string, stream uint32, domain uint8, due int64, key, name []byte) []byte {
	dst = appendDuePrefix(dst, task, stream, domain)
	dst = binary.BigEndian.AppendUint64(dst, uint64(due)^(1<<63))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(key)))
	dst = append(dst, key...)
	return append(dst, name...)
}

func dueKeyLen(task string, key, name []byte) int {
	return dueKeyOverhead + len(task) + len(key) + len(name)
}

// decodeDueKey splits a full due-index key. The returned slices alias k.
func decodeDueKey(k []byte) (task string, stream uint32, domain uint8, due int64, key, name []byte, err error) {
	rest, task, stream, err := decodeStreamPrefix(k, tableDue)
	if err != nil {
		return "", 0, 0, 0, nil, nil, err
	}
	if len(rest) < 1+8+4 {
		return "", 0, 0, 0, nil, nil, fmt.Errorf("%w: due key too short", ErrCorrupt)
	}
	domain = rest[0]
	due = int64(binary.BigEndian.Uint64(rest[1:]) ^ (1 << 63))
	n := binary.BigEndian.Uint32(rest[9:])
	rest = rest[13:]
	if uint64(n) > uint64(len(rest)) {
		return "", 0, 0, 0, nil, nil, fmt.Errorf("%w: due key length %d exceeds key", ErrCorrupt, n)
	}
	return task, stream, domain, due, rest[:n:n], rest[n:], nil
}

// decodeTimerKey splits a full timer key. The returned slices alias k.
func decodeTimerKey(k []byte) (task string, stream uint32, key, name []byte, err error) {
	rest, task, stream, err := decodeStreamPrefix(k, tableTimer)
	if err != nil {
		return "", 0, nil, nil, err
	}
	if len(rest) < 4 {
		return "", 0, nil, nil, fmt.Errorf("%w: timer key too short", ErrCorrupt)
	}
	n := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(n) > uint64(len(rest)) {
		return "", 0, nil, nil, fmt.Errorf("%w: timer key length %d exceeds key", ErrCorrupt, n)
	}
	return task, stream, rest[:n:n], rest[n:], nil
}

// appendTimerValue appends u8 domain | i64 due | payload.
func appendTimerValue(dst []byte, domain uint8, due int64, payload []byte) []byte {
	dst = append(dst, domain)
	return append(appendI64(dst, due), payload...)
}

// decodeTimerValue splits a timer value. payload aliases v.
func decodeTimerValue(v []byte) (domain uint8, due int64, payload []byte, err error) {
	if len(v) < timerValueOverhead {
		return 0, 0, nil, fmt.Errorf("%w: timer value of %d bytes", ErrCorrupt, len(v))
	}
	return v[0], int64(binary.BigEndian.Uint64(v[1:])), v[timerValueOverhead:], nil
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

// StateKeyRoom is the most bytes len(key)+len(name) of one state entry of
// task may have: what MaxStateKeyLen leaves after the task name. A record key
// longer than this can hold no state at all (not even its mark), so the host
// refuses such records at ingest.
func StateKeyRoom(task string) int { return MaxStateKeyLen - len(task) }

// TimerKeyRoom is the most bytes len(key)+len(name) of one timer of task may
// have: what MaxTimerKeyLen leaves after the task name.
func TimerKeyRoom(task string) int { return MaxTimerKeyLen - len(task) }
