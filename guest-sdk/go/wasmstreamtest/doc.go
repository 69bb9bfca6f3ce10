// Package wasmstreamtest runs wasmstream handlers natively, without a wasm runtime, against an
// in-memory host that follows ABI.md: per-key state with the batch's key scope, state and emit
// refused during init, scan paging, all-or-nothing batches.
//
// A test imports the package that registers the handlers (for a task written as package main,
// write the test in that package) and drives them:
//
//	func TestCount(t *testing.T) {
//		res, err := wasmstreamtest.Run(wasmstreamtest.Options{Config: []byte(`{"min_len":2}`)},
//			[]wasmstreamtest.Input{{Key: []byte("alice"), Value: []byte("hello hello"), Timestamp: 1}})
//		if err != nil {
//			t.Fatal(err)
//		}
//		// res.Outputs, res.State ...
//	}
//
// Run is one init and one batch; New gives a Host to run several batches against the same state.
// A Host runs the guest's init before the first call that needs it (a batch, a firing, a tick, a
// migration, a metric read), as the real host does; call Init yourself to check what init returns
// or, a second time, to stand for a replacement instance.
//
// The Host also drives the ABI 0.2 callbacks. It keeps timers per partition, key and name (Timers,
// SetTimer) and fires the due ones, in order of time, then key, then name, only when the test says
// so: AdvanceTime moves the processing clock, AdvanceWatermark a partition's watermark, FireDue
// fires what is already due; Result.Fired lists the firings delivered. Tick runs the tick
// handler. SetStateVersion records the state version of a key as an older module would have;
// the harness then calls the migration handler before the next call involving the key, in the
// same unit of work, or at once for every stale key with MigrateAll. Options.HTTP answers
// wasmstream.HTTPDo in place of the network.
//
// The harness calls the same SDK code a wasm build runs: the batch is encoded with the ABI codec,
// written into the SDK's input buffer and decoded by the SDK. Differences from a real host: a
// handler panic becomes a *CallError with Panic set instead of a trap, and package variables are
// not reset after it (a real host starts a fresh instance); there are no size or write limits;
// NowMs starts at Options.NowMs and moves only with AdvanceTime; watermarks move only with
// AdvanceWatermark (records do not move them, and Input.Late is what the test sets); a tick sees
// every key with state, as the harness does not track which partition a key belongs to. Handlers
// are package globals, so a Host is not safe for concurrent use and only one Host serves the SDK
// at a time (the last one made): do not use t.Parallel.
//
// The package is empty when built for wasip1.
package wasmstreamtest
