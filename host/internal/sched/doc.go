// Package sched decides which work runs next: it holds the per-key queues of every input stream
// and forms batches for the worker pool, under the ordering, fairness and memory rules of
// DESIGN S1-S6 and the retry rules of S17.
//
// The Scheduler is a synchronous, deterministic data structure: it starts no goroutine, reads no
// clock and uses no randomness. One goroutine (the event loop) owns it and passes the current
// time to Next. Nothing here blocks; the caller decides what to do when Next has nothing to give.
//
// # Model
//
// An Item belongs to a stream (a partition) and a key. Items of one (stream, key) form a FIFO
// queue. Next forms a Batch from ready keys:
//
//   - a key is in at most one in-flight batch, with its items adjacent and in push order; its
//     next items wait until Complete or Retry is called for that batch (S1, S6);
//   - a batch holds at most MaxBatchItems items, at most MaxKeyItems of them from one key; at most
//     MaxBatches batches are in flight;
//   - a stream has at most MaxStreamInFlight items in flight (S3); with MaxStreamInFlight 1 the
//     scheduler runs the stream strictly in push order, one item at a time across all its keys
//     (only the stream's oldest queued item is eligible, so a younger key never overtakes);
//   - keys are taken round robin: one key from each stream in turn, and within a stream in the
//     order keys became ready; a key that completes a batch goes to the back (S5). A hot key
//     therefore gets at most MaxKeyItems per batch and one turn per round;
//   - a stream at its in-flight limit, or a key that never completes, holds back only itself;
//     other keys and streams go on (S4).
//
// # Backpressure
//
// The scheduler never refuses an item. Instead, per stream, it moves between running and paused
// with two marks (Juggle): it pauses when its queued items reach HighItems, its queued bytes reach
// HighBytes, or one of its keys reaches MaxKeyDepth queued items, and resumes when items and bytes
// are back at LowItems and LowBytes and no key is above half of MaxKeyDepth. Flow returns the
// changes since its last call; the caller pauses and resumes fetching accordingly. A producer
// that checks Flow after each push keeps a stream's queue within HighItems items (HighBytes plus
// one item's size, MaxKeyDepth per key); one that checks after each fetched batch, within the
// marks plus that batch. Retry may add back up to MaxStreamInFlight items on top. Queued counts
// items waiting, not items in flight, which MaxStreamInFlight bounds.
//
// # Failures
//
// Retry puts a failed batch's items back at the front of their keys, in order. With isolate,
// each of those items then runs alone in its own batch until all of them have completed, so the
// failing item can be identified and its neighbours are not re-run with it; RetryIsolating
// isolates only the keys it is told. Insert places an item among its key's queued items by their
// values rather than at the tail (the task places event-time firings so). Delay holds a key
// until a deadline (the back-off of S17); NextWake tells the loop when to call Next again. The
// retry policy (how often, how long, dead-lettering) is the caller's.
//
// # Streams
//
// AddStream and RemoveStream follow partition assignment. RemoveStream returns the queued items
// it drops; batches already in flight are completed or retried as usual and their items are then
// discarded. Idle reports when a stream has nothing queued or in flight, for draining on revoke
// and for partition-wide callbacks.
//
// # Use
//
//	s, err := sched.New[Record](cfg)
//	s.AddStream(partition)
//	s.Push(sched.Item[Record]{Stream: partition, Key: k, Offset: off, Size: n, Value: rec})
//	for _, c := range s.Flow() { pauseOrResume(c.Stream, c.Paused) }
//	for {
//		b, ok := s.Next(now)
//		if !ok { break }
//		dispatch(b) // later, on the loop goroutine: s.Complete(b.ID) or s.Retry(b.ID, isolate)
//	}
//	if at, ok := s.NextWake(); ok { armTimer(at) }
//
// # Cost
//
// Push, Complete and Retry are O(1) amortised per item; Next is O(1) amortised per item it
// dispatches, with no scan over keys or streams (keys wait in per-stream ready lists, streams in a
// ring, delayed keys in a heap at O(log n) per Delay). A key with nothing queued or in flight is
// freed, and every structure shrinks as it drains, so memory follows the items held. Stats costs
// O(streams).
package sched
