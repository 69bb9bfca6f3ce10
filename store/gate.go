package store

import (
	"os"
	"path/filepath"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
)

// Every write transaction goes through update or commitTxn, the store's one write gate:
//
//   - before it, the free-space check (ErrDiskFull below Options.MinFreeBytes);
//   - after it, allocateLogs.
//
// Badger writes its memtable log through a memory-mapped file that it creates at full size
// (twice MemTableSize) but sparse: a write into a page the file system has no block for yet
// needs one, and on a full disk the kernel answers with SIGBUS, which kills the process. The
// free-space check alone cannot prevent that when something else fills the disk between the
// check and Badger's write, so allocateLogs gives every memtable log all its blocks as soon as
// the store sees it: writes into it then never need a new block. The cost is disk space that
// Badger would use anyway once the memtable fills: twice MemTableSize per memtable log.
//
// Values of at least the value threshold (1 MiB) go to Badger's value log instead, also a
// sparse memory-mapped file, but of 2 GiB: it is not allocated, and a value that large written
// as the disk fills can still end in SIGBUS.

// update runs fn in a read-write Badger transaction through the write gate.
func (db *DB) update(fn func(txn *badger.Txn) error) error {
	if err := db.checkSpace(); err != nil {
		return err
	}
	err := db.bdb.Update(fn)
	db.allocateLogs()
	return err
}

// commitTxn commits the read-write transaction txn through the write gate.
func (db *DB) commitTxn(txn *badger.Txn) error {
	if err := db.checkSpace(); err != nil {
		return err
	}
	err := txn.Commit()
	db.allocateLogs()
	return err
}

// memLogSuffix names Badger's memtable log files.
const memLogSuffix = ".mem"

// allocateLogs allocates every block of the memtable logs in the store's directory not yet
// allocated (see the write gate above). It is best effort: a file system that cannot
// allocate, or a platform without fallocate, leaves the file as Badger made it.
func (db *DB) allocateLogs() {
	if db.dir == "" || db.opts.ReadOnly {
		return
	}
	ents, err := os.ReadDir(db.dir)
	if err != nil {
		return
	}
	db.allocMu.Lock()
	defer db.allocMu.Unlock()
	seen := make(map[string]bool, len(db.allocated))
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, memLogSuffix) {
			continue
		}
		seen[name] = true
		if db.allocated[name] {
			continue
		}
		if allocateFile(filepath.Join(db.dir, name)) == nil {
			if db.allocated == nil {
				db.allocated = map[string]bool{}
			}
			db.allocated[name] = true
		}
	}
	for name := range db.allocated {
		if !seen[name] { // flushed into a table and deleted by Badger
			delete(db.allocated, name)
		}
	}
}
