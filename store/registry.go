package store

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// The module registry: every module version deployed for a task, its bytes stored once per
// content (SHA-256), and the task's active version. See the package documentation for the
// layout.

// DefaultKeepVersions is the keep argument of AddModule callers use by default.
const DefaultKeepVersions = 10

// maxModuleChunk is the largest piece of a module's bytes stored under one key. Each piece is
// written in a transaction of its own, so the chunk stays well below Badger's transaction limit
// whatever MemTableSize is.
const maxModuleChunk = 256 << 10

// ModuleVersion is one version of a task's module in the registry.
type ModuleVersion struct {
	// Version numbers a task's versions 1, 2, 3, … in the order they were added; a number is
	// never reused, even after its version was pruned.
	Version uint64
	// SHA256 is the hash of the module's bytes, which are stored once however many versions
	// (of any task) share them.
	SHA256 [32]byte
	// Size is the length of the module in bytes.
	Size int64
	// Created is when the version was added, in ms since the Unix epoch.
	Created int64
	// ABIVersion is the ABI version the module declared (major << 16 | minor).
	ABIVersion uint32
	// Origin says where the version came from, e.g. "file" or "deploy". The store does not
	// interpret it.
	Origin string
	// Exports and Imports are the module's export names and "module.name" imports.
	Exports []string
	Imports []string
	// Status is what is known of how the version ran: nothing yet, proven good, or bad. It is
	// set with SetModuleStatus; AddModule stores it as given.
	Status ModuleStatus
}

// Module version states (ModuleStatus.State).
const (
	// ModuleGood: the version ran successfully at least once.
	ModuleGood = "good"
	// ModuleBad: the version failed to start (its init trapped, ran out of fuel, exited, …); a
	// host does not start it again by itself.
	ModuleBad = "bad"
)

// ModuleStatus is what a host learnt of a module version by running it.
type ModuleStatus struct {
	// State is "" (nothing known), ModuleGood or ModuleBad.
	State string
	// At is when the state was set, in ms since the Unix epoch.
	At int64
	// Reason says why a version is bad.
	Reason string
}

// ActiveModule is the version of a task's module that the task runs.
type ActiveModule struct {
	// Version is a ModuleVersion.Version of the task.
	Version uint64
	// Since is when it became active, in ms since the Unix epoch.
	Since int64
	// Origin says how it became active, e.g. "file", "deploy" or "rollback". The store does
	// not interpret it.
	Origin string
}

// AddModule stores wasm as a new version of task's module, numbered one above the task's
// highest version, and returns the version with Version, SHA256 and Size filled in (the
// caller's values of these fields are ignored; the others are stored as given). It does not
// make the version active.
//
// Then it prunes the task's history to the keep newest versions (keep ≤ 0 keeps all) and
// the active version, however old, and deletes the bytes of modules no remaining version of
// any task refers to.
//
// The bytes are written first, in pieces, then the version record in one transaction: a
// crash in between leaves unreferenced bytes, which a later AddModule deletes, and no
// version.
func (db *DB) AddModule(task string, wasm []byte, mv ModuleVersion, keep int) (ModuleVersion, error) {
	if err := db.enterWrite(task); err != nil {
		return ModuleVersion{}, err
	}
	defer db.leave()
	db.registryMu.Lock()
	defer db.registryMu.Unlock()

	mv.SHA256 = sha256.Sum256(wasm)
	mv.Size = int64(len(wasm))
	chunk := min(maxModuleChunk, max(db.opts.MaxTxnBytes/2, 1))
	for i := 0; i == 0 || i*chunk < len(wasm); i++ {
		piece := wasm[i*chunk : min((i+1)*chunk, len(wasm))]
		err := db.update(func(txn *badger.Txn) error {
			return txn.Set(appendModuleChunkKey(nil, mv.SHA256, uint32(i)), piece)
		})
		if err != nil {
			return ModuleVersion{}, wrapErr("add module", err)
		}
	}

	err := db.update(func(txn *badger.Txn) error {
		versions, err := readVersions(txn, task)
		if err != nil {
			return err
		}
		mv.Version = 1
		if len(versions) > 0 {
			mv.Version = versions[len(versions)-1].Version + 1
		}
		if err := txn.Set(appendVersionKey(nil, task, mv.Version), appendVersionValue(nil, mv)); err != nil {
			return err
		}
		versions = append(versions, mv)
		active, hasActive, err := readActive(txn, task)
		if err != nil {
			return err
		}
		if keep > 0 && len(versions) > keep {
			kept := versions[:0:0]
			for i, v := range versions {
				if i >= len(versions)-keep || hasActive && v.Version == active.Version {
					kept = append(kept, v)
					continue
				}
				if err := txn.Delete(appendVersionKey(nil, task, v.Version)); err != nil {
					return err
				}
			}
			versions = kept
		}
		return deleteUnreferencedModules(txn, task, versions)
	})
	if err != nil {
		return ModuleVersion{}, wrapErr("add module", err)
	}
	return mv, nil
}

// deleteUnreferencedModules deletes the bytes of every module that no version refers to.
// versions are task's versions as they are once txn commits; the task's own records in txn are
// not read again.
func deleteUnreferencedModules(txn *badger.Txn, task string, versions []ModuleVersion) error {
	used := map[[32]byte]bool{}
	for _, v := range versions {
		used[v.SHA256] = true
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tableVersionRecord}})
	for it.Rewind(); it.Valid(); it.Next() {
		_, t, err := decodeTaskPrefix(it.Item().Key(), tableVersionRecord)
		if err != nil {
			it.Close()
			return err
		}
		if t == task {
			continue
		}
		err = it.Item().Value(func(v []byte) error {
			mv, err := decodeVersionValue(v)
			used[mv.SHA256] = true
			return err
		})
		if err != nil {
			it.Close()
			return err
		}
	}
	it.Close()
	var dead [][]byte
	it = txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tableModule}, PrefetchValues: false})
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().KeyCopy(nil)
		sum, _, err := decodeModuleChunkKey(k)
		if err != nil {
			it.Close()
			return err
		}
		if !used[sum] {
			dead = append(dead, k)
		}
	}
	it.Close()
	for _, k := range dead {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// ModuleVersions returns task's versions, oldest first.
func (db *DB) ModuleVersions(task string) ([]ModuleVersion, error) {
	if err := validTask(task); err != nil {
		return nil, err
	}
	if err := db.enter(); err != nil {
		return nil, err
	}
	defer db.leave()
	var out []ModuleVersion
	err := db.bdb.View(func(txn *badger.Txn) (err error) {
		out, err = readVersions(txn, task)
		return err
	})
	return out, wrapErr("module versions", err)
}

// ModuleVersion returns version v of task's module and whether it exists.
func (db *DB) ModuleVersion(task string, v uint64) (ModuleVersion, bool, error) {
	if err := validTask(task); err != nil {
		return ModuleVersion{}, false, err
	}
	var mv ModuleVersion
	var ok bool
	err := db.get(appendVersionKey(nil, task, v), func(val []byte) (err error) {
		mv, err = decodeVersionValue(val)
		ok = err == nil
		return err
	})
	return mv, ok, wrapErr("module version", err)
}

// ModuleBytes returns a copy of the bytes of the module whose SHA-256 is sum. It returns an
// error wrapping ErrNoSuchModule if they are not stored, and ErrCorrupt if what is stored does
// not hash to sum.
func (db *DB) ModuleBytes(sum [32]byte) ([]byte, error) {
	prefix := appendModulePrefix(nil, sum)
	var out []byte
	next := uint32(0)
	err := db.iterate(prefix, nil, func(k []byte, item *badger.Item) (bool, error) {
		_, i, err := decodeModuleChunkKey(k)
		if err != nil {
			return false, err
		}
		if i != next {
			return false, fmt.Errorf("%w: module %x misses piece %d", ErrCorrupt, sum, next)
		}
		next++
		return true, item.Value(func(v []byte) error {
			out = append(out, v...)
			return nil
		})
	})
	if err != nil {
		return nil, wrapErr("module bytes", err)
	}
	if next == 0 {
		return nil, fmt.Errorf("%w: %x", ErrNoSuchModule, sum)
	}
	if sha256.Sum256(out) != sum {
		return nil, fmt.Errorf("store: module bytes: %w: module %x does not hash to its key", ErrCorrupt, sum)
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}

// SetActiveModule makes a.Version task's active version. It returns an error wrapping
// ErrNoSuchVersion if the task has no such version.
func (db *DB) SetActiveModule(task string, a ActiveModule) error {
	if err := db.enterWrite(task); err != nil {
		return err
	}
	defer db.leave()
	db.registryMu.Lock()
	defer db.registryMu.Unlock()
	err := db.update(func(txn *badger.Txn) error {
		_, err := txn.Get(appendVersionKey(nil, task, a.Version))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("%w: task %q has no version %d", ErrNoSuchVersion, task, a.Version)
		}
		if err != nil {
			return err
		}
		return txn.Set(appendActiveKey(nil, task), appendActiveValue(nil, a))
	})
	return wrapErr("set active module", err)
}

// SetModuleStatus records what is known of how version v of task's module ran. It returns an
// error wrapping ErrNoSuchVersion if the task has no such version.
func (db *DB) SetModuleStatus(task string, v uint64, st ModuleStatus) error {
	if err := db.enterWrite(task); err != nil {
		return err
	}
	defer db.leave()
	db.registryMu.Lock()
	defer db.registryMu.Unlock()
	err := db.update(func(txn *badger.Txn) error {
		key := appendVersionKey(nil, task, v)
		item, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("%w: task %q has no version %d", ErrNoSuchVersion, task, v)
		}
		if err != nil {
			return err
		}
		var mv ModuleVersion
		if err := item.Value(func(val []byte) (err error) {
			mv, err = decodeVersionValue(val)
			return err
		}); err != nil {
			return err
		}
		mv.Status = st
		return txn.Set(key, appendVersionValue(nil, mv))
	})
	return wrapErr("set module status", err)
}

// ActiveModule returns task's active version and whether it has one.
func (db *DB) ActiveModule(task string) (ActiveModule, bool, error) {
	if err := validTask(task); err != nil {
		return ActiveModule{}, false, err
	}
	if err := db.enter(); err != nil {
		return ActiveModule{}, false, err
	}
	defer db.leave()
	var a ActiveModule
	var ok bool
	err := db.bdb.View(func(txn *badger.Txn) (err error) {
		a, ok, err = readActive(txn, task)
		return err
	})
	return a, ok, wrapErr("active module", err)
}

func readVersions(txn *badger.Txn, task string) ([]ModuleVersion, error) {
	prefix := appendTaskPrefix(nil, tableVersionRecord, task)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
	defer it.Close()
	var out []ModuleVersion
	for it.Rewind(); it.ValidForPrefix(prefix); it.Next() {
		k := it.Item().Key()
		if len(k) != len(prefix)+8 {
			return nil, fmt.Errorf("%w: version key %x", ErrCorrupt, k)
		}
		err := it.Item().Value(func(v []byte) error {
			mv, err := decodeVersionValue(v)
			if err != nil {
				return err
			}
			if mv.Version != binary.BigEndian.Uint64(k[len(prefix):]) {
				return fmt.Errorf("%w: version record %x holds version %d", ErrCorrupt, k, mv.Version)
			}
			out = append(out, mv)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b ModuleVersion) int { return cmp.Compare(a.Version, b.Version) })
	return out, nil
}

func readActive(txn *badger.Txn, task string) (a ActiveModule, ok bool, err error) {
	item, err := txn.Get(appendActiveKey(nil, task))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return a, false, nil
	}
	if err != nil {
		return a, false, err
	}
	err = item.Value(func(v []byte) (err error) {
		a, err = decodeActiveValue(v)
		return err
	})
	return a, err == nil, err
}

// Keys and values of the registry tables.

func appendModulePrefix(dst []byte, sum [32]byte) []byte {
	return append(append(dst, tableModule), sum[:]...)
}

func appendModuleChunkKey(dst []byte, sum [32]byte, i uint32) []byte {
	return binary.BigEndian.AppendUint32(appendModulePrefix(dst, sum), i)
}

func decodeModuleChunkKey(k []byte) (sum [32]byte, i uint32, err error) {
	if len(k) != 1+32+4 || k[0] != tableModule {
		return sum, 0, fmt.Errorf("%w: module key %x", ErrCorrupt, k)
	}
	copy(sum[:], k[1:33])
	return sum, binary.BigEndian.Uint32(k[33:]), nil
}

func appendVersionKey(dst []byte, task string, v uint64) []byte {
	return binary.BigEndian.AppendUint64(appendTaskPrefix(dst, tableVersionRecord, task), v)
}

func appendActiveKey(dst []byte, task string) []byte {
	return appendTaskPrefix(dst, tableActive, task)
}

func appendString32(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

func appendVersionValue(dst []byte, mv ModuleVersion) []byte {
	dst = binary.BigEndian.AppendUint64(dst, mv.Version)
	dst = append(dst, mv.SHA256[:]...)
	dst = appendI64(dst, mv.Size)
	dst = appendI64(dst, mv.Created)
	dst = binary.BigEndian.AppendUint32(dst, mv.ABIVersion)
	dst = appendString32(dst, mv.Origin)
	for _, list := range [][]string{mv.Exports, mv.Imports} {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(list)))
		for _, s := range list {
			dst = appendString32(dst, s)
		}
	}
	// The status is an optional tail: records written before it existed have none.
	if st := mv.Status; st.State != "" {
		dst = appendString32(dst, st.State)
		dst = appendI64(dst, st.At)
		dst = appendString32(dst, st.Reason)
	}
	return dst
}

// reader decodes a value front to back, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: registry value truncated", ErrCorrupt)
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (r *reader) str() string {
	n := r.u32()
	if uint64(n) > uint64(len(r.b)) {
		r.err = cmp.Or(r.err, fmt.Errorf("%w: registry string of %d bytes exceeds value", ErrCorrupt, n))
		return ""
	}
	return string(r.take(int(n)))
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes in registry value", ErrCorrupt, len(r.b))
	}
	return r.err
}

func decodeVersionValue(v []byte) (ModuleVersion, error) {
	r := &reader{b: v}
	var mv ModuleVersion
	mv.Version = r.u64()
	copy(mv.SHA256[:], r.take(32))
	mv.Size = int64(r.u64())
	mv.Created = int64(r.u64())
	mv.ABIVersion = r.u32()
	mv.Origin = r.str()
	for _, list := range []*[]string{&mv.Exports, &mv.Imports} {
		n := r.u32()
		if uint64(n) > uint64(len(r.b))/4 {
			return ModuleVersion{}, fmt.Errorf("%w: registry list of %d names exceeds value", ErrCorrupt, n)
		}
		for range n {
			*list = append(*list, r.str())
		}
	}
	if r.err == nil && len(r.b) > 0 {
		mv.Status = ModuleStatus{State: r.str(), At: int64(r.u64()), Reason: r.str()}
	}
	return mv, r.done()
}

func appendActiveValue(dst []byte, a ActiveModule) []byte {
	dst = binary.BigEndian.AppendUint64(dst, a.Version)
	dst = appendI64(dst, a.Since)
	return appendString32(dst, a.Origin)
}

func decodeActiveValue(v []byte) (ActiveModule, error) {
	r := &reader{b: v}
	a := ActiveModule{Version: r.u64(), Since: int64(r.u64()), Origin: r.str()}
	return a, r.done()
}
