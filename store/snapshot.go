package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// KeySnapshot is the whole persisted state of one (stream, key): what a
// changelog carries for a key and what Restore writes back.
type KeySnapshot struct {
	// Key is the record key; any bytes, possibly empty.
	Key []byte
	// Names holds the key's Name/Value pairs in ascending bytewise name order,
	// each name once; Delete is never set.
	Names []Write
	// Timers holds every timer of the key, in any order, each name once. The
	// Key field of each is the snapshot's key (Restore ignores it).
	Timers []Timer
	// Mark is the key's applied mark (≥ NoneApplied), or NoneApplied if the
	// key has none (HasMark false).
	Mark int64
	// HasMark reports whether the key has a mark.
	HasMark bool
	// StateVersion is the state version stored with the mark (0 without a
	// mark).
	StateVersion uint32
}

// Snapshot returns the current snapshot of key in (task, stream), read from
// one Badger read transaction, so that it is consistent with some committed
// state: names, timers and mark all from the same commit. A key with nothing
// stored gives an empty snapshot (Key set, no names or timers, HasMark
// false). The snapshot's byte slices are copies owned by the caller; Values
// and Payloads are non-nil, possibly empty. Timers come in name order.
func (db *DB) Snapshot(task string, stream uint32, key []byte) (KeySnapshot, error) {
	if err := validTask(task); err != nil {
		return KeySnapshot{}, err
	}
	if err := db.enter(); err != nil {
		return KeySnapshot{}, err
	}
	defer db.leave()
	s := KeySnapshot{Key: append([]byte{}, key...), Mark: NoneApplied}
	err := db.bdb.View(func(txn *badger.Txn) error {
		prefix := appendStateKeyPrefix(nil, task, stream, key)
		if err := iteratePrefix(txn, prefix, func(k []byte, item *badger.Item) error {
			w := Write{Name: append([]byte{}, k[len(prefix):]...)}
			return item.Value(func(v []byte) error {
				w.Value = append([]byte{}, v...)
				s.Names = append(s.Names, w)
				return nil
			})
		}); err != nil {
			return err
		}
		prefix = appendTimerKeyPrefix(nil, task, stream, key)
		if err := iteratePrefix(txn, prefix, func(k []byte, item *badger.Item) error {
			t := Timer{Key: append([]byte{}, key...), Name: append([]byte{}, k[len(prefix):]...)}
			return item.Value(func(v []byte) error {
				domain, due, payload, err := decodeTimerValue(v)
				if err != nil {
					return fmt.Errorf("timer %q: %w", t.Name, err)
				}
				t.Domain, t.Due, t.Payload = domain, due, append([]byte{}, payload...)
				s.Timers = append(s.Timers, t)
				return nil
			})
		}); err != nil {
			return err
		}
		return readMark(txn, appendMarkKey(nil, task, stream, key), &s)
	})
	if err != nil {
		return KeySnapshot{}, wrapErr("snapshot", err)
	}
	return s, nil
}

// KeyRef names one (stream, key) of a task.
type KeyRef struct {
	Stream uint32
	Key    []byte
	// Written, if not nil, is the key's change in a checkpoint committed
	// last (no commit of the task since): the snapshot's mark and state
	// version are taken from it, as Commit wrote them, instead of read. A
	// caller that applies the change to the snapshot (KeySnapshot.Apply, which
	// sets the mark from it) may pass it before the commit too.
	Written *KeyWrites
}

// Snapshots reads the current snapshots of keys in task, as Snapshot does for
// each, from one Badger read transaction: every snapshot is that of the same
// committed state. It calls fn with each key's index in keys and its
// snapshot, in the store's order of the keys (by stream, then key length,
// then key bytes), and stops at fn's first error, which it returns. The
// snapshot and its byte slices are valid only until fn returns (they are
// reused for the next key): fn encodes or copies what it keeps. fn runs with
// the store's read lock held (a Close waits for it): it must not block.
// Timers come in name order; Values and Payloads are non-nil, possibly empty.
// A key whose KeyRef carries a Written with Whole set comes with no names
// (its state entries are not read: applying Written gives them).
//
// In that order one state iterator walks from key to key, stepping forward
// where the next key is close and seeking where it is not; timers are looked
// up only in streams that hold some; the mark is read unless the KeyRef
// carries it. A Snapshot per key costs a transaction, two iterators and a
// lookup each (the changelog's checkpoint writes a snapshot of every key it
// changed).
func (db *DB) Snapshots(task string, keys []KeyRef, fn func(i int, s *KeySnapshot) error) error {
	if err := validTask(task); err != nil {
		return err
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.leave()
	txn := db.bdb.NewTransaction(false)
	defer txn.Discard()
	stateIt := txn.NewIterator(badger.IteratorOptions{Prefix: appendTaskPrefix(nil, tableState, task)})
	defer stateIt.Close()
	timerIt := txn.NewIterator(badger.IteratorOptions{Prefix: appendTaskPrefix(nil, tableTimer, task)})
	defer timerIt.Close()
	hasTimers := map[uint32]bool{} // per stream: whether it holds any timer
	var (
		s      KeySnapshot
		arena  = make([]byte, 0, 4096) // the snapshot's bytes, reused from key to key; never nil
		prefix []byte
	)
	// keep copies b into arena; the copies stay valid while arena does not
	// grow, so slices into it are taken only after every copy of a key.
	type span struct{ off, n int }
	var names, vals, tnames, pays []span
	keep := func(b []byte) span {
		arena = append(arena, b...)
		return span{len(arena) - len(b), len(b)}
	}
	at := func(sp span) []byte { return arena[sp.off : sp.off+sp.n : sp.off+sp.n] }
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ka, kb := &keys[a], &keys[b]
		if c := cmp.Compare(ka.Stream, kb.Stream); c != 0 {
			return c
		}
		if c := cmp.Compare(len(ka.Key), len(kb.Key)); c != 0 {
			return c
		}
		return bytes.Compare(ka.Key, kb.Key)
	})
	// moveTo positions it at the first item at or after prefix: by a few steps
	// forward when it stands before prefix and after the previous key's items
	// (after, true: keys come in order, and no key's prefix is a prefix of
	// another's), else by a seek.
	moveTo := func(it *badger.Iterator, prefix []byte, after bool) {
		for steps := 0; after && steps < 16 && it.Valid(); steps++ {
			if bytes.Compare(it.Item().Key(), prefix) >= 0 {
				return
			}
			it.Next()
		}
		it.Seek(prefix)
	}
	err := func() error {
		var prev *KeyRef
		for _, i := range order {
			k := &keys[i]
			after := prev != nil && (prev.Stream != k.Stream || !bytes.Equal(prev.Key, k.Key))
			prev = k
			arena, names, vals, tnames, pays = arena[:0], names[:0], vals[:0], tnames[:0], pays[:0]
			s = KeySnapshot{Key: k.Key, Names: s.Names[:0], Timers: s.Timers[:0], Mark: NoneApplied}
			if w := k.Written; w == nil || !w.Whole {
				prefix = appendStateKeyPrefix(prefix[:0], task, k.Stream, k.Key)
				for moveTo(stateIt, prefix, after); stateIt.ValidForPrefix(prefix); stateIt.Next() {
					item := stateIt.Item()
					names = append(names, keep(item.Key()[len(prefix):]))
					if err := item.Value(func(v []byte) error { vals = append(vals, keep(v)); return nil }); err != nil {
						return err
					}
				}
			}
			var timerDomains []byte
			var timerDues []int64
			has, known := hasTimers[k.Stream]
			if !known {
				p := appendStreamPrefix(nil, tableTimer, task, k.Stream)
				timerIt.Seek(p)
				has = timerIt.ValidForPrefix(p)
				hasTimers[k.Stream] = has
			}
			if has {
				prefix = appendTimerKeyPrefix(prefix[:0], task, k.Stream, k.Key)
				for timerIt.Seek(prefix); timerIt.ValidForPrefix(prefix); timerIt.Next() {
					item := timerIt.Item()
					name := item.Key()[len(prefix):]
					if err := item.Value(func(v []byte) error {
						domain, due, payload, err := decodeTimerValue(v)
						if err != nil {
							return fmt.Errorf("timer %q: %w", name, err)
						}
						tnames = append(tnames, keep(name))
						pays = append(pays, keep(payload))
						timerDomains = append(timerDomains, domain)
						timerDues = append(timerDues, due)
						return nil
					}); err != nil {
						return err
					}
				}
			}
			if w := k.Written; w != nil {
				if w.Mark != DropMark {
					s.Mark, s.StateVersion, s.HasMark = w.Mark, w.StateVersion, true
				}
			} else if err := readMark(txn, appendMarkKey(prefix[:0], task, k.Stream, k.Key), &s); err != nil {
				return err
			}
			for j := range names {
				s.Names = append(s.Names, Write{Name: at(names[j]), Value: at(vals[j])})
			}
			for j := range tnames {
				s.Timers = append(s.Timers, Timer{Key: k.Key, Name: at(tnames[j]), Domain: timerDomains[j], Due: timerDues[j], Payload: at(pays[j])})
			}
			if err := fn(i, &s); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		return wrapErr("snapshot", err)
	}
	return nil
}

// readMark reads the mark at key into s, leaving s without a mark if there is
// none.
func readMark(txn *badger.Txn, key []byte, s *KeySnapshot) error {
	item, err := txn.Get(key)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return nil
	case err != nil:
		return err
	}
	return item.Value(func(v []byte) (err error) {
		s.Mark, s.StateVersion, err = decodeMark(v)
		s.HasMark = err == nil
		return err
	})
}

// iteratePrefix calls fn for every key with prefix in txn, in order.
func iteratePrefix(txn *badger.Txn, prefix []byte, fn func(k []byte, item *badger.Item) error) error {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 16})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		if err := fn(it.Item().Key(), it.Item()); err != nil {
			return err
		}
	}
	return nil
}

// SnapshotFormatVersion is the first byte of an encoded KeySnapshot
// (EncodeSnapshot). DecodeSnapshot refuses other versions.
const SnapshotFormatVersion byte = 1

const snapshotFlagMark byte = 1 << 0 // the snapshot has a mark

// EncodeSnapshot appends the binary encoding of s to dst and returns the
// extended slice. The layout (see the package documentation) is
//
//	u8 version (1) | u8 flags (bit 0: has mark)
//	[ varint mark | uvarint state version ]       only with a mark
//	uvarint len(key) | key
//	uvarint n | n × (uvarint len(name) | name | uvarint len(value) | value)
//	uvarint n | n × (uvarint len(name) | name | u8 domain | varint due
//	                 | uvarint len(payload) | payload)
//
// where uvarint and varint are those of encoding/binary (base-128 groups,
// least significant first; varint zigzag-encodes the sign). Without a mark,
// Mark and StateVersion are not encoded. Write.Delete and Timer.Key are not
// encoded. EncodeSnapshot does not check s; DecodeSnapshot and Restore do.
func EncodeSnapshot(dst []byte, s *KeySnapshot) []byte {
	var flags byte
	if s.HasMark {
		flags |= snapshotFlagMark
	}
	dst = append(dst, SnapshotFormatVersion, flags)
	if s.HasMark {
		dst = binary.AppendVarint(dst, s.Mark)
		dst = binary.AppendUvarint(dst, uint64(s.StateVersion))
	}
	dst = appendBytesUvarint(dst, s.Key)
	dst = binary.AppendUvarint(dst, uint64(len(s.Names)))
	for i := range s.Names {
		dst = appendBytesUvarint(dst, s.Names[i].Name)
		dst = appendBytesUvarint(dst, s.Names[i].Value)
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.Timers)))
	for i := range s.Timers {
		t := &s.Timers[i]
		dst = appendBytesUvarint(dst, t.Name)
		dst = append(dst, t.Domain)
		dst = binary.AppendVarint(dst, t.Due)
		dst = appendBytesUvarint(dst, t.Payload)
	}
	return dst
}

func appendBytesUvarint(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

// DecodeSnapshot decodes an EncodeSnapshot encoding. It returns an error
// wrapping ErrCorrupt for anything malformed: another format version,
// unknown flags, truncation, trailing bytes, an integer out of range, a mark
// below NoneApplied, a timer domain above MaxTimerDomain, names not strictly
// ascending or a timer name twice. The snapshot's byte slices share one copy
// of b (b may be reused afterwards); Values and Payloads are non-nil. Without
// a mark, Mark is NoneApplied and StateVersion 0. Each timer's Key is the
// snapshot's Key (the same slice).
func DecodeSnapshot(b []byte) (KeySnapshot, error) {
	if len(b) < 2 {
		return KeySnapshot{}, fmt.Errorf("%w: snapshot of %d bytes", ErrCorrupt, len(b))
	}
	if b[0] != SnapshotFormatVersion {
		return KeySnapshot{}, fmt.Errorf("%w: snapshot format version %d (want %d)", ErrCorrupt, b[0], SnapshotFormatVersion)
	}
	flags := b[1]
	if flags&^snapshotFlagMark != 0 {
		return KeySnapshot{}, fmt.Errorf("%w: snapshot flags %#x", ErrCorrupt, flags)
	}
	d := snapDecoder{b: bytes.Clone(b[2:])}
	s := KeySnapshot{Mark: NoneApplied}
	if flags&snapshotFlagMark != 0 {
		s.HasMark = true
		s.Mark = d.varint()
		v := d.uvarint()
		if d.err == nil && v > math.MaxUint32 {
			d.fail("state version %d out of range", v)
		}
		s.StateVersion = uint32(v)
		if d.err == nil && s.Mark < NoneApplied {
			d.fail("mark %d below %d", s.Mark, NoneApplied)
		}
	}
	s.Key = d.bytes()
	// Each name takes at least two bytes, each timer at least four: bound the
	// counts by what is left before allocating.
	if n := d.count(2); n > 0 {
		s.Names = make([]Write, n)
		for i := range s.Names {
			s.Names[i] = Write{Name: d.bytes(), Value: d.bytes()}
			if d.err == nil && i > 0 && bytes.Compare(s.Names[i-1].Name, s.Names[i].Name) >= 0 {
				d.fail("name %.64q not after %.64q", s.Names[i].Name, s.Names[i-1].Name)
			}
		}
	}
	if n := d.count(4); n > 0 {
		s.Timers = make([]Timer, n)
		for i := range s.Timers {
			t := Timer{Key: s.Key, Name: d.bytes(), Domain: d.byte1(), Due: d.varint(), Payload: d.bytes()}
			if d.err == nil && t.Domain > MaxTimerDomain {
				d.fail("timer %.64q: domain %d > %d", t.Name, t.Domain, MaxTimerDomain)
			}
			s.Timers[i] = t
		}
		if d.err == nil && duplicateTimerName(s.Timers) {
			d.fail("a timer name appears twice")
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return KeySnapshot{}, d.err
	}
	return s, nil
}

// duplicateTimerName reports whether two timers have the same name.
func duplicateTimerName(ts []Timer) bool {
	if len(ts) < 2 {
		return false
	}
	sorted := true
	for i := 1; i < len(ts) && sorted; i++ {
		sorted = bytes.Compare(ts[i-1].Name, ts[i].Name) < 0
	}
	if sorted {
		return false // the usual case: Snapshot returns timers in name order
	}
	names := make([][]byte, len(ts))
	for i := range ts {
		names[i] = ts[i].Name
	}
	slices.SortFunc(names, bytes.Compare)
	for i := 1; i < len(names); i++ {
		if bytes.Equal(names[i-1], names[i]) {
			return true
		}
	}
	return false
}

// snapDecoder reads an encoded snapshot; after the first error every read
// returns zero values and err keeps that error.
type snapDecoder struct {
	b   []byte
	err error
}

func (d *snapDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: snapshot: "+format, append([]any{ErrCorrupt}, args...)...)
	}
	d.b = nil
}

func (d *snapDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad or truncated uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *snapDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad or truncated varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *snapDecoder) byte1() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// bytes reads uvarint len | bytes and returns a non-nil slice of d.b (capped
// so that appending to it cannot overwrite what follows).
func (d *snapDecoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("length %d exceeds the %d bytes left", n, len(d.b))
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

// count reads a uvarint count of items of at least minLen bytes each and
// checks that they fit in what is left.
func (d *snapDecoder) count(minLen int) int {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)/minLen) {
		d.fail("count %d exceeds the %d bytes left", n, len(d.b))
	}
	if d.err != nil {
		return 0
	}
	return int(n)
}

// Apply changes s into the snapshot its key has once kw commits on top of it: the writes and
// timer operations in order, then the mark and state version. Committing kw and then taking
// Snapshot gives the same result; Apply needs no commit, for a change that must be shipped
// (e.g. in a Kafka transaction) before it is applied locally. kw must be of s's key.
func (s *KeySnapshot) Apply(kw *KeyWrites) {
	for _, w := range kw.Writes {
		i, found := slices.BinarySearchFunc(s.Names, w.Name, func(n Write, name []byte) int { return bytes.Compare(n.Name, name) })
		switch {
		case w.Delete && found:
			s.Names = slices.Delete(s.Names, i, i+1)
		case w.Delete:
		case found:
			s.Names[i].Value = w.Value
		default:
			s.Names = slices.Insert(s.Names, i, Write{Name: w.Name, Value: w.Value})
		}
	}
	for _, op := range kw.Timers {
		i := slices.IndexFunc(s.Timers, func(t Timer) bool { return bytes.Equal(t.Name, op.Name) })
		if op.Delete {
			if i >= 0 {
				s.Timers = slices.Delete(s.Timers, i, i+1)
			}
			continue
		}
		payload := op.Payload
		if payload == nil {
			payload = []byte{}
		}
		t := Timer{Key: s.Key, Name: op.Name, Domain: op.Domain, Due: op.Due, Payload: payload}
		if i >= 0 {
			s.Timers[i] = t
		} else {
			s.Timers = append(s.Timers, t)
		}
	}
	if kw.Mark == DropMark {
		s.Mark, s.HasMark, s.StateVersion = NoneApplied, false, 0
		return
	}
	s.Mark, s.HasMark, s.StateVersion = kw.Mark, true, kw.StateVersion
}

// StreamKeys returns every key of (task, stream) that holds a state entry, a
// timer or an applied mark, each once, in bytewise order: the keys whose
// snapshots are the stream's whole state (a host publishing a partition's
// state to a changelog that has none of it reads them in batches with
// Snapshots). It seeks past the names and timers of each key.
func (db *DB) StreamKeys(task string, stream uint32) ([][]byte, error) {
	if err := validTask(task); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	add := func(key []byte) { seen[string(key)] = true }
	err := db.marks(task, stream, func(key []byte, _ int64, _ uint32) bool { add(key); return true })
	if err == nil {
		err = db.Keys(task, stream, nil, true, func(key []byte) bool { add(key); return true })
	}
	if err == nil {
		err = db.iterateSeek(appendStreamPrefix(nil, tableTimer, task, stream), nil, func(k []byte, _ *badger.Item) ([]byte, bool, error) {
			_, _, key, name, err := decodeTimerKey(k)
			if err != nil {
				return nil, false, err
			}
			add(key)
			return prefixEnd(k[:len(k)-len(name)]), true, nil
		})
	}
	if err != nil {
		return nil, wrapErr("stream keys", err)
	}
	keys := make([][]byte, 0, len(seen))
	for k := range seen {
		keys = append(keys, []byte(k))
	}
	slices.SortFunc(keys, bytes.Compare)
	return keys, nil
}
