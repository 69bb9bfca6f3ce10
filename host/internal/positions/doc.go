// Package positions tracks, for one input stream (a partition), which position may be committed.
//
// Records enter a stream in increasing offset order, possibly with gaps (Kafka compaction and
// transaction markers leave holes), and finish in any order because different keys run
// concurrently. The committable position is the point a restarted reader must resume from so that
// every record before it has been fully processed (DESIGN S8):
//
//	committable = 1 + the highest added offset o such that every added offset <= o is complete
//	            = the resume position given to NewTracker while no such o exists
//
// Completing {0, 2, 3} of {0, 1, 2, 3} makes 1 committable; completing 1 then makes 4. Gaps are
// never skipped ahead of an unfinished record: after Add(5), Add(8), Complete(5) the committable
// position is 6, not 8, and it becomes 9 once 8 completes.
//
// # Use
//
// One Tracker per stream, owned by the goroutine that owns the stream (a Tracker is not safe for
// concurrent use):
//
//	t := positions.NewTracker(resumeFrom)
//	t.Add(rec.Offset)       // when the record is handed to the scheduler
//	...
//	t.Complete(rec.Offset)  // when its work item has finished (any order)
//	...
//	commit(t.Committable()) // at checkpoint time, together with the state it covers
//
// Add and Complete return an error instead of panicking when the caller breaks the contract
// (an offset that does not increase, or completing an offset that is not in flight); the tracker is
// unchanged by a call that returns an error.
//
// # Cost
//
// The tracker keeps only the records between the committable position and the newest added
// record: a ring of (offset, done) slots from which the completed prefix is popped. Memory is
// O(records in flight), and shrinks again after a burst. Add and Committable are O(1); Complete is
// O(1) amortised when offsets are dense, and O(log n) in the number of slots when gaps make the
// direct index guess miss.
package positions
