// Package chain connects tasks of one host: a task's named output becomes another task's input
// without a broker in between (the in-process equivalent of a repartition topic).
//
// A Log is one (upstream task, output name) pair. The upstream appends the records it emits to
// that output to the log's entries in the store (store.Checkpoint.Chain), numbered from 0, in the
// same transaction as its state, marks and positions: a crash keeps the records and the state
// that produced them, or neither, so replay cannot emit twice what was committed. A Reader is one
// downstream input of the log: it reads the entries from its stream's committed position on and
// hands them to its task's loop as records (offset = entry number, key = the output's key), so
// the downstream's positions and applied marks make its reading exactly once like a file's.
//
// Once a downstream's checkpoint covers entries (Reader.Covered), the log trims what every
// reader covers (always keeping its last entry, which numbers the next). Back-pressure: the
// upstream asks Blocked before dispatching work and holds while the log holds MaxBacklog
// entries or more that some reader's checkpoint does not cover; Covered wakes it.
//
// Goroutines: the upstream's loop appends (Append, Committed), each reader runs its own
// goroutine (Run) and its task's loop calls Covered, Pause and Resume; the Log's counters are
// atomics and its reader list is fixed before the tasks start.
package chain
