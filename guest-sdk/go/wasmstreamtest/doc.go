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
//
// The harness calls the same SDK code a wasm build runs: the batch is encoded with the ABI codec,
// written into the SDK's input buffer and decoded by the SDK. Differences from a real host: a
// handler panic becomes a *CallError with Panic set instead of a trap, and package variables are
// not reset after it (a real host starts a fresh instance); there are no size or write limits;
// NowMs is fixed by Options. Handlers are package globals, so a Host is not safe for concurrent
// use and only one Host serves the SDK at a time (the last one made): do not use t.Parallel.
//
// The package is empty when built for wasip1.
package wasmstreamtest
