package modrt

import (
	"bytes"
	"unsafe"
)

// scopeKey is one record key of the current call (DESIGN S12) and its write overlay.
type scopeKey struct {
	// key is the caller's bytes (the Key of a record passed to Process), valid during the call.
	key []byte
	// owned is a copy of key shared by the Writes of this key, made on the first write.
	owned []byte
	// last is 1 + the index in Instance.writes of the key's latest write in this call, 0 before
	// the first; Instance.prevWrite chains each write to the key's write before it, so a key's
	// few writes are found without an index. writes counts them.
	last, writes int32
	// names maps a state name to the index in Instance.writes of its latest write in this call,
	// once the key has more than scopeLinear writes; nil until then.
	names map[string]int32
	// txnEntries and txnBytes are the store cost of the key's writes and timer operations in
	// this call, its mark included (budget.go); 0 until the first.
	txnEntries, txnBytes int
}

// scopeLinear is the number of distinct keys up to which lookups scan the key list instead of
// using the index map (no hashing, no string allocation for the common small batch).
const scopeLinear = 8

// scope is the set of record keys of the current call. Its memory is reused between calls.
type scope struct {
	keys  []scopeKey
	index map[string]int32 // key → position in keys; used once there are more than scopeLinear keys
}

func (s *scope) reset() {
	clear(s.keys) // drop references to the previous call's bytes
	s.keys = s.keys[:0]
	if s.index != nil {
		clear(s.index)
	}
}

// add puts key in the scope (once).
func (s *scope) add(key []byte) {
	if s.find(key) != nil {
		return
	}
	s.keys = append(s.keys, scopeKey{key: key})
	switch n := len(s.keys); {
	case n == scopeLinear+1:
		if s.index == nil {
			s.index = make(map[string]int32, 2*scopeLinear)
		}
		for k := range s.keys {
			s.index[keyString(s.keys[k].key)] = int32(k)
		}
	case n > scopeLinear+1:
		s.index[keyString(key)] = int32(n - 1)
	}
}

// keyString is key as a string sharing its bytes, for the index: every key added is the host's
// own (a record's, a firing's or a copy), never modified while the call runs, and reset clears
// the index before the bytes go away.
func keyString(key []byte) string { return unsafe.String(unsafe.SliceData(key), len(key)) }

// find returns the scope entry for key, or nil when key is not in the current call.
func (s *scope) find(key []byte) *scopeKey {
	if len(s.keys) <= scopeLinear {
		for k := range s.keys {
			if bytes.Equal(s.keys[k].key, key) {
				return &s.keys[k]
			}
		}
		return nil
	}
	if k, ok := s.index[string(key)]; ok {
		return &s.keys[k]
	}
	return nil
}
