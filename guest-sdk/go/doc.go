// Package wasmstream is the Go guest SDK of wasmstream: it turns a Go package into a stateful
// stream task module that a wasmstream host runs (the ABI is abi/ABI.md in the wasmstream
// repository; this package implements its guest side, version 0.5, and a module built with it
// declares 0.5).
//
// # Writing a task
//
// A task is a package main with an empty main and an init function that registers the handlers.
// The module is a WASI reactor: the host never runs main, it calls the exports this package
// provides (wasmstream_abi_version, wasmstream_alloc, wasmstream_init, wasmstream_process, and
// since 0.2 wasmstream_on_timer, wasmstream_on_tick, wasmstream_state_version and
// wasmstream_migrate, which are always exported; without a registered handler a tick or a
// migration does nothing and a timer firing fails the call).
//
//	package main
//
//	import wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
//
//	func main() {}
//
//	func init() {
//		wasmstream.Handle(func(r *wasmstream.Record) error {
//			return wasmstream.Emit("echo", r.Key(), r.Value())
//		})
//	}
//
// Build it with standard Go (about 2 MB) or TinyGo (tens of KB):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o task.wasm .
//	tinygo build -target=wasip1 -buildmode=c-shared -scheduler=none -no-debug -o task.wasm .
//
// Always pass -scheduler=none to TinyGo: with its default scheduler every call into the module
// costs about a millisecond and millions of fuel units. Add -trimpath to the go build line to keep your machine's paths out of panic
// messages. The SDK starts no goroutine, uses no reflection and no fmt or encoding/json, so it
// builds with either toolchain; keep your handler TinyGo-friendly the same way if you want the
// small build.
//
// # Records and batches
//
// The host delivers records in batches. Handle's function is called once per record, in batch
// order; records of one key arrive in order and a key is never processed twice at once, so its
// state is never raced. Records of different keys are independent and their relative order is
// unspecified.
//
// Everything a Record returns as []byte (Key, Value, header values) is a view into the batch in
// guest memory, valid only until the handler returns: copy what you keep.
//
// A batch is all or nothing. If the handler returns an error the SDK reports it to the host
// (ABI fail) and the batch fails: none of its state writes or outputs take effect. If the handler
// panics, the module traps with the same effect, and the host throws this instance away and starts
// a fresh one, so package variables are lost; that is the right thing for a bug, but return
// errors for expected failures.
//
// # State
//
// State is a map per record key: Record.State gives the map of the record's key, with Get, Put,
// Delete and Scan (ascending by name, with a prefix). Reads see the batch's own earlier writes. The
// host refuses keys outside the batch (StateOf, ErrKeyNotInBatch) and any state access during
// init (ErrNotAllowed).
//
// # Timers and watermarks
//
// A handler sets a timer of a key in its call's scope with SetTimer (by name; setting it again
// replaces it) and removes it with DeleteTimer. A ProcessingTime timer fires when NowMs reaches
// its time, an EventTime timer when the partition's Watermark does. Firings go to the function
// registered with HandleTimer; like state writes, timer changes take effect only if the call
// succeeds, and a firing whose call fails fires again. Record.Late reports a record whose
// timestamp was already below the watermark when the host read it.
//
//	wasmstream.Handle(func(r *wasmstream.Record) error {
//		// ... add the record to the key's "sum", then close its one-minute window once the
//		// watermark passes it.
//		end := r.Timestamp() - r.Timestamp()%60000 + 60000
//		return wasmstream.SetTimer(r.Key(), "window", wasmstream.EventTime, end, nil)
//	})
//	wasmstream.HandleTimer(func(f *wasmstream.Firing) error {
//		sum, _, err := f.State().Get("sum")
//		if err != nil {
//			return err
//		}
//		return wasmstream.Emit("sums", f.Key(), sum)
//	})
//
// # Ticks
//
// HandleTick registers a function the host calls every configured interval per partition, with
// the partition's clock and watermark. During a tick every key of the partition is in scope, and
// Tick.Keys lists the keys that have state, e.g. to expire old ones.
//
// # State versions
//
// A module that changes the format of its state declares a version with SetStateVersion (in a Go
// init function) and registers a HandleMigrate function. Before the module touches a key whose
// state an older (or newer) version wrote, the host calls it with the key and both versions; the
// function rewrites the key's state, or returns an error when it cannot (e.g. a downgrade).
//
// # Outbound HTTP
//
// HTTPDo sends a request and waits for the response. It needs a grant in the task's configuration
// (otherwise ErrNotAllowed); a failed connection or a timeout is ErrUnavailable, and any HTTP
// status is a success. Requests are not part of a call's all-or-nothing effects: a retried call
// sends them again.
//
// # Outputs, logs, time, config
//
// Emit and EmitWith send records to named outputs; the host releases them in emit order when the
// batch succeeds. EmitTombstone (or Output.ValueNull) emits a null value, a tombstone (ABI 0.5),
// and Record.ValueNull reports a record whose value is null. Emit stamps an output with the time of what is handled: the record's timestamp,
// an event-time firing's time, else processing time (the rule every wasmstream SDK shares). Log (and Debug, Info, Warn, Error) write to the host's log. NowMs is the host's
// processing time; the sandbox's own clock is not real time. Config returns the task's JSON
// configuration, also handed to the function registered with HandleInit.
//
// # JSON and typed state
//
// ParseJSONObject and JSONWriter read and write flat JSON objects of scalars without reflection.
// Value, Counter, Map and List keep typed data in a key's state with a documented byte encoding
// (see typed.go and the README) that the Rust SDK shares, over any Store: a State, or the
// read-only view wasmstreamtest.Host.Read gives a test.
//
// # Errors
//
// Host function failures are *HostError values; errors.Is matches them against ErrNotFound,
// ErrKeyNotInBatch and the other sentinels, which are the ABI error codes.
//
// # Testing
//
// Package wasmstreamtest runs the registered handlers natively against an in-memory host, so
// a task's tests are ordinary go test runs; it also fires timers when a test advances the clock
// or a watermark, runs ticks and migrations, and answers HTTPDo with a test's function. In a native build without that harness, calling a
// host-backed function panics.
package wasmstream
