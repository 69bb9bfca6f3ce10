package statecache

import (
	"bytes"
	"hash/maphash"
	"math"
	"slices"
	"sort"
	"unsafe"

	"github.com/wasmstream/wasmstream/store"
)

// Loader reads a key's persisted state: it calls fn for each name and fills meta, when not nil,
// with the key's applied mark and state version.
type Loader func(stream uint32, key []byte, meta *Meta, fn func(name, val []byte)) error

// Meta is what the store keeps about a key besides its names.
type Meta struct {
	Found        bool   // the key has a mark: its state was written at least once
	Mark         int64  // the applied mark (store.KeyWrites.Mark)
	StateVersion uint32 // the state version of the module that last wrote the key
}

// entryOverhead approximates the memory one Entry costs beyond its bytes.
const (
	entryOverhead = 256
	nameOverhead  = 64
)

type slot struct {
	name    []byte
	val     []byte
	deleted bool // tombstone kept until the delete is collected
	dirty   bool
}

// Entry is the state of one (stream, key). Its methods other than Load, Get and Scan are the
// loop's; Load, Get and Scan may run on the worker that holds the key's batch.
type Entry struct {
	// The fields a lookup reads come first, with short keys' bytes in the entry itself
	// (inline): finding a key then reads one run of memory instead of three (the map's key
	// string, the entry, its key's bytes), each of which missed the CPU caches.
	key       []byte
	stream    uint32
	pins      int
	owner     uint64 // the last PinOnce owner: a pin of that owner is held
	next      *Entry // the next entry whose lookup hash is the same (Cache.entries)
	inline    [inlineKey]byte
	slots     slotList // sorted by name
	loaded    bool
	mark      int64
	first     int64           // the lowest record offset applied since the last Collect; MaxInt64: none
	stateVers uint32          // the state version of the module that last wrote the key
	versSet   bool            // the loop set stateVers (SetStateVersion): Load keeps it
	timers    []store.TimerOp // timer ops not yet collected, in order
	dirty     bool            // some slot or the mark is dirty; the entry is in Cache.dirty
	written   bool            // some slot is dirty
	dropLater bool            // collected tombstones wait for the last Unpin to be dropped
	orphan    bool            // dropped from the cache (DropStream) while pinned: the cache no longer counts it
	dropped   bool            // dropped from the cache (DropStream): taken off Cache.dirty
	size      int64
	counted   int64 // the part of size that Cache.size includes; Load changes size alone
	// snap, when snapKnown, bounds from above the bytes of the key's snapshot (store
	// KeySnapshot, encoded) with every write and timer operation applied so far: the host sets
	// it from an exact count (SetSnapshotBytes), Apply and AddTimer raise it by what they add
	// (and lower it by a value they replace or delete).
	snap      int
	snapKnown bool
	// pendEntries and pendBytes are what the key's uncollected writes and timer operations
	// cost in the store's transaction, as the loop charged them (Charge); 0 after Collect.
	pendEntries, pendBytes int
	// markStored says the store holds, or the checkpoint in flight writes, a mark entry for
	// the key with state version storedVers: read by Load, or collected by Collect (whose
	// checkpoint writes the mark, or keeps one with the same version). A checkpoint may then
	// leave the entry as it is (store.KeyWrites.MarkStored). storedMark is that entry's mark:
	// the one Load read, or the one Collect collected (the store holds it, or a lower one the
	// checkpoint kept below the Next it committed). A checkpoint whose key has the same mark
	// and version writes no mark entry for it (store.KeyWrites.MarkUnchanged).
	markStored bool
	storedVers uint32
	storedMark int64
}

// Pending returns what Charge counted since the entry's writes were last collected.
func (e *Entry) Pending() (entries, bytes int) { return e.pendEntries, e.pendBytes }

// Key returns the entry's record key. Do not modify it.
func (e *Entry) Key() []byte { return e.key }

// KeyString returns the entry's record key as a string that shares its bytes, which are never
// modified: a map key for the entry that costs no copy.
func (e *Entry) KeyString() string { return unsafe.String(unsafe.SliceData(e.key), len(e.key)) }

// Stream returns the entry's stream.
func (e *Entry) Stream() uint32 { return e.stream }

// Loaded reports whether the persisted state has been read in.
func (e *Entry) Loaded() bool { return e.loaded }

// Load reads the key's persisted state once. Writes applied before the load (blind writes)
// win over persisted values.
func (e *Entry) Load(load Loader) error {
	if e.loaded {
		return nil
	}
	var persisted []slot
	var meta Meta
	err := load(e.stream, e.key, &meta, func(name, val []byte) {
		persisted = append(persisted, slot{name: bytes.Clone(name), val: bytes.Clone(val)})
	})
	if err != nil {
		return err
	}
	if meta.Found {
		// A key changed before its load (by a timer firing or a tick, which carry no offset)
		// keeps the persisted mark: replay must still skip what it covers.
		e.mark = max(e.mark, meta.Mark)
		if !e.markStored {
			// Not when a Collect set it: that checkpoint's mark is newer than the store's (it
			// may be in flight).
			e.markStored, e.storedVers, e.storedMark = true, meta.StateVersion, meta.Mark
		}
		if !e.versSet {
			// A version the loop set wins, committed or not: the store may not have it yet
			// (a checkpoint in flight).
			e.stateVers = meta.StateVersion
		}
	}
	sort.Slice(persisted, func(i, j int) bool { return bytes.Compare(persisted[i].name, persisted[j].name) < 0 })
	for _, p := range persisted {
		if i, ok := e.find(p.name); !ok {
			e.insert(i, p)
		}
	}
	e.loaded = true
	return nil
}

func (e *Entry) find(name []byte) (slotPos, bool) { return e.slots.find(name) }

func (e *Entry) insert(p slotPos, s slot) {
	e.slots.insert(p, s)
	e.size += int64(nameOverhead + len(s.name) + len(s.val))
}

// Size returns the bytes the entry counts for its state: names, values and NameOverhead a name.
func (e *Entry) Size() int64 { return e.size }

// NameOverhead is what a name costs in an entry's Size beyond its bytes and its value's.
const NameOverhead = nameOverhead

// HasState reports whether the key has at least one name. The entry must be loaded.
func (e *Entry) HasState() bool {
	has := false
	e.slots.each(func(s *slot) bool {
		has = !s.deleted
		return !has
	})
	return has
}

// StateVersion is the state version of the module that last wrote the key (0: unknown). The
// entry must be loaded.
func (e *Entry) StateVersion() uint32 { return e.stateVers }

// Get returns state[key][name]; the value must not be modified. The entry must be loaded.
func (e *Entry) Get(name []byte) ([]byte, bool) {
	i, ok := e.find(name)
	if !ok || e.slots.at(i).deleted {
		return nil, false
	}
	return e.slots.at(i).val, true
}

// Scan calls fn, in ascending name order, for the names that start with prefix and sort after
// `after` (all of them if fromStart), until fn returns false. The entry must be loaded.
func (e *Entry) Scan(prefix, after []byte, fromStart bool, fn func(name, val []byte) bool) {
	start := prefix
	if !fromStart && bytes.Compare(after, prefix) >= 0 {
		start = after
	}
	i, found := e.find(start)
	if found && !fromStart && bytes.Equal(start, after) {
		i.i++
	}
	e.slots.from(i, func(s *slot) bool {
		if !bytes.HasPrefix(s.name, prefix) {
			return false
		}
		return s.deleted || fn(s.name, s.val)
	})
}

// inlineKey is the longest key an entry holds in itself rather than in a slice of its own.
const inlineKey = 32

// Cache is a task's state cache. It is owned by one goroutine (the task loop).
type Cache struct {
	load Loader
	// entries holds the entries by a hash of (stream, key) (hashKey): a map of fixed-size keys
	// that compares no string, and no copy of the key made to look one up. The rare entries
	// whose hashes collide are chained through Entry.next.
	entries map[uint64]*Entry
	seed    maphash.Seed
	count   int // entries held
	// dirty lists the entries with something to collect, each once: an entry is appended when
	// it becomes dirty, and Collect walks the list. (A set of them cost the loop a map insert
	// per changed key and a map walk per checkpoint.) An entry DropStream dropped is taken
	// off the list.
	dirty  []*Entry
	budget int64
	size   int64
	hits   int64 // Pins that found the entry (Lookups)
	misses int64 // Pins that made it
}

// New returns a cache that loads from load and keeps about budget bytes of clean state.
func New(load Loader, budget int64) *Cache {
	return &Cache{load: load, entries: map[uint64]*Entry{}, seed: maphash.MakeSeed(), budget: budget}
}

// Loader returns the cache's loader, for workers to Load entries with.
func (c *Cache) Loader() Loader { return c.load }

// hashMask is all ones but in tests that make every hash collide, to exercise the chains.
var hashMask = ^uint64(0)

// hashKey is the map key of (stream, key).
func (c *Cache) hashKey(stream uint32, key []byte) uint64 {
	return (maphash.Bytes(c.seed, key) ^ uint64(stream)*0x9e3779b97f4a7c15) & hashMask
}

// lookup returns the entry of (stream, key), nil if none, and the key's hash.
func (c *Cache) lookup(stream uint32, key []byte) (*Entry, uint64) {
	h := c.hashKey(stream, key)
	for e := c.entries[h]; e != nil; e = e.next {
		if e.stream == stream && bytes.Equal(e.key, key) {
			return e, h
		}
	}
	return nil, h
}

// add makes the entry of (stream, key), whose hash is h and which the cache does not hold.
func (c *Cache) add(stream uint32, key []byte, h uint64) *Entry {
	e := &Entry{stream: stream, mark: -1, first: math.MaxInt64, size: entryOverhead + int64(len(key))}
	if len(key) <= inlineKey {
		e.key = e.inline[:len(key):len(key)]
		copy(e.key, key)
	} else {
		e.key = bytes.Clone(key)
	}
	e.next = c.entries[h]
	c.entries[h] = e
	c.count++
	c.account(e)
	return e
}

// remove takes e, whose hash is h, out of the cache's map.
func (c *Cache) remove(e *Entry, h uint64) {
	c.count--
	head := c.entries[h]
	if head == e {
		if e.next == nil {
			delete(c.entries, h)
		} else {
			c.entries[h] = e.next
		}
		e.next = nil
		return
	}
	for p := head; p != nil; p = p.next {
		if p.next == e {
			p.next = e.next
			e.next = nil
			return
		}
	}
}

// each calls fn for every entry the cache holds, with its hash, until fn returns false; fn may
// remove the entry it is given.
func (c *Cache) each(fn func(e *Entry, h uint64) bool) {
	for h, e := range c.entries {
		for e != nil {
			next := e.next
			if !fn(e, h) {
				return
			}
			e = next
		}
	}
}

// Pin returns the entry of (stream, key), creating an unloaded one if needed, and protects it
// from eviction until Unpin.
func (c *Cache) Pin(stream uint32, key []byte) *Entry {
	e, h := c.lookup(stream, key)
	if e != nil {
		c.hits++
	} else {
		c.misses++
		e = c.add(stream, key, h)
	}
	e.pins++
	return e
}

// PinOnce is Pin for an owner that pins each of its keys once (a job's group, whose owner
// numbers are unique and never 0): it returns the entry and whether this call pinned it; when the
// owner already holds the entry it returns it unpinned again. A job forms its set of keys
// with it, without a map of its own (the loop's cost per record).
func (c *Cache) PinOnce(stream uint32, key []byte, owner uint64) (*Entry, bool) {
	e, h := c.lookup(stream, key)
	switch {
	case e != nil && e.owner == owner:
		return e, false
	case e != nil:
		c.hits++
	default:
		c.misses++
		e = c.add(stream, key, h)
	}
	e.owner = owner
	e.pins++
	return e, true
}

// Peek returns the entry of (stream, key) if the cache holds one, without pinning it or
// counting a lookup; nil if none. The loop reads a Peeked entry only while it is not Pinned.
func (c *Cache) Peek(stream uint32, key []byte) *Entry {
	e, _ := c.lookup(stream, key)
	return e
}

// Entries calls fn for every entry the cache holds, in no order, until fn returns false.
func (c *Cache) Entries(fn func(e *Entry) bool) {
	c.each(func(e *Entry, _ uint64) bool { return fn(e) })
}

// Pinned reports whether a batch holds the entry: its worker may be loading or reading it.
func (e *Entry) Pinned() bool { return e.pins > 0 }

// Unpin releases a Pin. After the last one, it counts what a worker's Load added to the entry
// and drops the tombstones a Collect left in place.
func (c *Cache) Unpin(e *Entry) {
	e.pins--
	if e.orphan {
		return
	}
	if e.pins == 0 {
		if e.dropLater {
			c.dropTombstones(e)
		}
		c.account(e)
	}
}

// DropStream forgets every entry of stream: its keys are loaded from the store again on next
// use. The loop calls it when a partition is assigned, since what the cache still holds of the
// partition from an earlier ownership is stale once another host processed it. Dirty entries are
// dropped uncollected (the caller checkpointed what it owned). An entry a job still pins stays
// valid for that job but is no longer the cache's: a later Pin of its key makes a new one.
func (c *Cache) DropStream(stream uint32) int {
	n := 0
	c.each(func(e *Entry, h uint64) bool {
		if e.stream != stream {
			return true
		}
		c.remove(e, h)
		e.dropped = true
		c.size -= e.counted
		e.counted = 0
		if e.pins > 0 {
			e.orphan = true
		}
		n++
		return true
	})
	if n > 0 {
		c.dirty = slices.DeleteFunc(c.dirty, func(e *Entry) bool { return e.dropped })
	}
	return n
}

// account brings the cache's size up to date with e's: Load runs on a worker and cannot
// touch the cache, so what it adds is counted when the loop next handles the entry.
func (c *Cache) account(e *Entry) {
	c.size += e.size - e.counted
	e.counted = e.size
}

// Apply records state[key][name] = val, or its deletion. The loop calls it for a succeeded
// batch's writes, in order. The entry must be loaded (a worker loads every key it wrote). It
// returns the length of the value of name's uncollected write it replaces, or -1 when name had
// none (the write adds an entry to the key's next commit).
func (c *Cache) Apply(e *Entry, name, val []byte, del bool) (replaced int) {
	replaced = -1
	i, ok := e.find(name)
	if e.snapKnown {
		if ok && !e.slots.at(i).deleted {
			e.snap -= len(name) + len(e.slots.at(i).val)
		}
		if !del {
			e.snap += len(name) + len(val) + snapNameOverhead
		}
	}
	if ok {
		s := e.slots.at(i)
		if s.dirty {
			replaced = len(s.val)
		}
		e.size += int64(len(val) - len(s.val))
		s.val, s.deleted, s.dirty = val, del, true
		if del {
			e.size -= int64(len(val))
			s.val = nil
		}
	} else {
		if del {
			val = nil
		}
		e.insert(i, slot{name: name, val: val, deleted: del, dirty: true})
	}
	c.account(e)
	e.written = true
	c.markDirty(e)
	return replaced
}

// SetMark records that the key's state now includes every record of its stream up to offset.
func (c *Cache) SetMark(e *Entry, offset int64) {
	if offset > e.mark {
		e.mark = offset
		c.markDirty(e)
	}
}

// SetFirst records that the key's state includes the effects of the record at offset, which the
// next Collect must cover: Collect reports the lowest such offset as KeyWrites.First.
func (c *Cache) SetFirst(e *Entry, offset int64) {
	e.first = min(e.first, offset)
}

// SetStateVersion records the state version of the module whose effects were just applied to
// the key.
func (c *Cache) SetStateVersion(e *Entry, v uint32) {
	e.versSet = true
	if e.stateVers != v {
		e.stateVers = v
		c.markDirty(e)
	}
}

// AddTimer records a timer set or delete of the key, committed with its state.
func (c *Cache) AddTimer(e *Entry, op store.TimerOp) {
	if e.snapKnown && !op.Delete {
		e.snap += len(op.Name) + len(op.Payload) + snapTimerOverhead
	}
	e.timers = append(e.timers, op)
	c.markDirty(e)
}

// Charge adds the store cost of a write or timer operation just applied to e (Apply, AddTimer),
// which the loop computes (store.StateWriteCost, store.TimerOpCost); Collect resets it. The loop
// uses it to checkpoint before a key's writes outgrow one store transaction.
func (c *Cache) Charge(e *Entry, entries, bytes int) {
	e.pendEntries += entries
	e.pendBytes += bytes
}

func (c *Cache) markDirty(e *Entry) {
	if !e.dirty {
		e.dirty = true
		c.dirty = append(c.dirty, e)
	}
}

// Dirty is the number of entries with writes not yet collected.
func (c *Cache) Dirty() int { return len(c.dirty) }

// Size is the approximate memory the cache holds, in bytes.
func (c *Cache) Size() int64 { return c.size }

// Lookups returns how many Pins found their key's entry in the cache (hits) and how many
// made a new one, whose state is then read from the store (misses).
func (c *Cache) Lookups() (hits, misses int64) { return c.hits, c.misses }

// Len is the number of cached entries.
func (c *Cache) Len() int { return c.count }

// Per-name and per-timer bytes a snapshot's encoding adds at most to the name and value or
// payload (lengths, domain, due time).
const (
	snapNameOverhead  = 16
	snapTimerOverhead = 32
)

// SnapshotBytes returns the bound SetSnapshotBytes set, raised by what was applied since, and
// whether there is one.
func (e *Entry) SnapshotBytes() (n int, known bool) { return e.snap, e.snapKnown }

// SetSnapshotBytes records n, an exact count of the bytes of the key's encoded snapshot.
func (e *Entry) SetSnapshotBytes(n int) { e.snap, e.snapKnown = n, true }

// Uncollected returns e's writes, timer operations, mark and state version not yet collected by
// a checkpoint, as Collect would put them in one, without collecting them. The slices share
// memory with e. No worker may hold e.
func (e *Entry) Uncollected() store.KeyWrites {
	kw := store.KeyWrites{Stream: e.stream, Key: e.key, Mark: e.mark, StateVersion: e.stateVers, Timers: e.timers}
	if e.written {
		e.slots.each(func(s *slot) bool {
			if s.dirty {
				kw.Writes = append(kw.Writes, store.Write{Name: s.name, Value: s.val, Delete: s.deleted})
			}
			return true
		})
	}
	return kw
}

// Collect appends every dirty entry's writes and mark to cp and marks them clean. The values in
// cp share memory with the cache; they are never modified in place, only replaced.
//
// Collect may run while workers hold pinned entries (a checkpoint with batches in flight): it
// reads a pinned entry's slots only if it has writes to collect (then it is loaded, and Load
// no longer changes it), changes nothing a worker reads, and leaves a pinned entry's collected
// tombstones in place until its last Unpin.
func (c *Cache) Collect(cp *store.Checkpoint) {
	// The keys' writes share one backing array (each key's slice capped at its own), so that a
	// checkpoint of n keys costs a few allocations, not n.
	var writes []store.Write
	for _, e := range c.dirty {
		stored := e.markStored && e.storedVers == e.stateVers
		kw := store.KeyWrites{Stream: e.stream, Key: e.key, Mark: e.mark, StateVersion: e.stateVers, Timers: e.timers, First: e.first,
			MarkStored: stored, MarkUnchanged: stored && e.storedMark == e.mark}
		// Once this checkpoint commits, the store holds the key's mark entry with this version
		// and mark (or a lower mark kept below the Next it commits): the next one is collected
		// only after that (a failed commit halts the task; an aborted transaction, a reset or a
		// restore drop the stream's entries, which load again).
		e.markStored, e.storedVers, e.storedMark = true, e.stateVers, e.mark
		e.timers, e.first = nil, math.MaxInt64
		e.pendEntries, e.pendBytes = 0, 0
		if e.written {
			// Whole: the entry holds the key's persisted names (loaded) and this checkpoint
			// writes every name it has (a tombstone collected before, waiting for its last
			// Unpin, names no state): a changelog snapshot then reads no state entry.
			kw.Whole = e.loaded
			if writes == nil {
				writes = make([]store.Write, 0, len(c.dirty))
			}
			from, tombs := len(writes), false
			e.slots.each(func(s *slot) bool {
				if s.dirty {
					writes = append(writes, store.Write{Name: s.name, Value: s.val, Delete: s.deleted})
					s.dirty = false
				} else if !s.deleted {
					kw.Whole = false
				}
				tombs = tombs || s.deleted
				return true
			})
			kw.Writes = writes[from:len(writes):len(writes)]
			e.written = false
			switch {
			case !tombs: // nothing to drop
			case e.pins == 0:
				c.dropTombstones(e)
			default:
				e.dropLater = true
			}
		}
		e.dirty = false
		cp.Keys = append(cp.Keys, kw)
	}
	clear(c.dirty) // drop the references to the entries
	c.dirty = c.dirty[:0]
}

// dropTombstones removes the deletes that have been collected. No worker may hold e.
func (c *Cache) dropTombstones(e *Entry) {
	e.slots.keep(func(s *slot) bool {
		if s.deleted && !s.dirty {
			e.size -= int64(nameOverhead + len(s.name))
			return false
		}
		return true
	})
	e.dropLater = false
	c.account(e)
}

// Evict drops clean, unpinned entries until the cache is within its budget. Go's map order is
// random, so eviction samples entries at random.
func (c *Cache) Evict() int {
	n := 0
	c.each(func(e *Entry, h uint64) bool {
		if c.size <= c.budget {
			return false
		}
		if e.pins > 0 || e.dirty {
			return true
		}
		c.remove(e, h)
		c.size -= e.counted
		n++
		return true
	})
	return n
}
