// Package statecache keeps a task's state in memory so that the store (Badger) is off the
// per-record path (S13).
//
// The cache holds one Entry per (stream, key): the complete, sorted list of that key's state
// names and values, loaded from the store on first use, in blocks of 512 to 1024 names (slotList)
// so that a new name moves one block, not every name of a large key. Its single owner is the task's loop
// goroutine, with one exception that needs no lock: while a key is in a batch in flight, the loop
// has handed its Entry to that batch's worker, which may Load it and read it; the scheduler
// guarantees a key is in at most one batch at a time, and the loop touches the Entry again only
// after the worker's result came back over a channel.
//
// Writes are applied by the loop when a batch succeeds (Apply, SetMark). Collect gathers every
// dirty entry's writes and mark into a store checkpoint; the caller commits it (possibly on
// another goroutine, while the loop goes on) and only then calls Evict, which removes clean,
// unpinned entries while the cache holds more than its byte budget: an entry collected into a
// checkpoint not yet committed must stay, or its key would be read back from a store that lacks
// its change. Dirty or pinned entries are never evicted.
//
// Each entry knows the mark entry the store holds for its key (the mark and state version its
// Load read, or those its last Collect collected, which the caller committed before the next
// Collect: a failed commit stops the caller, and a caller that undoes one drops the stream,
// DropStream). Collect tells the store when the key's mark entry is stored with the state version
// it collects (store.KeyWrites.MarkStored) and when it is the very entry it would write
// (store.KeyWrites.MarkUnchanged: a key only timer firings, ticks or partition callbacks changed).
package statecache
