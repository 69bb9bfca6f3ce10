// Package modrt runs wasmstream task modules: it compiles and validates WebAssembly modules against
// the guest ABI (abi/ABI.md), instantiates them in a sandbox and calls them with batches of records,
// serving the wasmstream_v0 host functions. It is the only package that imports wazero; no wazero
// type appears in its API.
//
// # Use
//
//	rt, _ := modrt.NewRuntime(ctx, modrt.RuntimeConfig{CacheDir: dir, Logger: log})
//	defer rt.Close(ctx)
//	mod, err := rt.Compile(ctx, wasm, modrt.Limits{})  // validates; *ModuleError says what is wrong
//	inst, err := mod.Instantiate(ctx, modrt.InstanceConfig{Task: "t", Config: cfg, Now: clock})
//	eff, err := inst.Process(ctx, recs, env)           // env: committed state for recs' keys
//	if inst.Broken() { inst.Close(ctx); inst, err = mod.Instantiate(ctx, ...) }
//
// Compile once, pool instances: instantiating a standard Go guest costs milliseconds and megabytes,
// a call costs tens of nanoseconds.
//
// # What is validated
//
// Compile refuses, before returning, any module that is not well-formed wasm, cannot be
// fuel-metered (exception handling, typed function references, an export named like the
// counter), lacks an export of
// ABI §3 or has it with another signature, imports from wasmstream_v0 a name that is not a host
// function of ABI §4 (or with another signature), imports from wasi_snapshot_preview1 something
// WASI does not provide, imports from any other module, declares a memory whose minimum is above
// Limits.MaxMemoryPages or tables whose minimums add up to more than Limits.MaxTableElements,
// declares more functions, locals, nesting depth, nesting work or block work than Limits allows (compile
// bombs, refused before anything is compiled), traps or spends Limits.InitFuel in its start function or _initialize, or
// declares an incompatible ABI version. The
// *ModuleError lists every problem found, each naming the export, import or limit at fault.
//
// At run time every pointer and length a guest passes to a host function is checked (negative
// lengths, ranges past the end of memory, ptr+len wrapping in 32 bits): the guest gets
// ERR_OUT_OF_BOUNDS and the host never panics. A zero length is an empty byte string whatever its
// pointer (ABI §4). Size and count limits give ERR_TOO_LARGE and
// ERR_LIMIT; state and emit outside wasmstream_process give ERR_NOT_ALLOWED; state for a key that
// is not in the current batch gives ERR_KEY_NOT_IN_BATCH (DESIGN S12); malformed emitted headers
// and, when InstanceConfig.Outputs is set, unknown output names give ERR_INVALID.
//
// # Sandbox
//
// An instance gets WASI with no preopened directories, no environment, no arguments, no network,
// a fake clock and a deterministic random source, unless Limits.Grants grants directories,
// environment variables, the real clock or crypto random; its stdout and stderr are logged line
// by line, and the error of a call that traps carries the first lines of stderr and the last
// lines of stdout written during the call (stdio.go; 2 lines of 256 bytes each per stream). Grants.HTTP lets http_request reach an allowlist of hosts (http.go): one keep-alive
// client and one concurrency bound per Module, a blocking request bounded by the call's context
// and the request's timeout.
// An instance holds at most MaxOpenFiles files open in its granted directories (rootfs.go).
// Memory is capped by Limits.MaxMemoryPages: memory.grow beyond it returns -1 to the guest.
// Processing time comes from InstanceConfig.Now (now_ms).
//
// # Memory ownership per call
//
//   - Process encodes the Batch into guest memory the guest returned from wasmstream_alloc; the
//     guest owns it (ABI §3). recs is only read during the call.
//   - Views of guest memory given to Env (name, prefix, after) are valid only until the Env method
//     returns. Bytes the host keeps (state writes, outputs, fail messages) are copied out of guest
//     memory before the host function returns.
//   - Effects returned by Process are owned by the caller and never touched again by the Instance.
//
// # Goroutines
//
// Runtime and Module are safe for concurrent use. An Instance is not: one goroutine at a time calls
// Process, and the Env it passes is called only from that goroutine, during the call. No method
// starts a goroutine of its own; with an HTTP grant, net/http's transport keeps a goroutine or two
// per idle keep-alive connection, dropped by Module.Close (or after 90 s idle).
//
// # Failures
//
// A call fails with a *CallError when the export returns non-zero (Code, with the guest's fail
// message), when it traps or exits (Trap), or when the Env returned an error during it; a failed
// call has no effects. A call during which the guest called fail_permanent (ABI 0.4) fails
// whatever it returns, with CallError.Permanent set (Err ErrFailedPermanently): the caller does
// not retry it. After a trap the guest's state is unknown and wazero does not poison the
// instance, so this package does (DESIGN S18): Broken reports true, Process returns ErrBroken, and
// the caller closes the Instance and makes a new one.
//
// # CPU time
//
// Every call into the guest is bounded by fuel (Limits.FuelPerRecord, Limits.InitFuel): Compile
// has package fuel rewrite the module so that it counts down an exported counter at function
// entries and loop headers (and by size at bulk memory and table instructions) and traps when it
// runs out; Instance.call, the single place the host enters the guest, starts the call's budget
// before the call and reads what is left after, and turns a trap with a negative counter into a
// *FuelError (errors.Is ErrFuelExhausted). A call of a host function costs fuel.HostCallUnits
// (counted by the rewrite, at the call); host functions charge the call for the bytes they copy
// besides (slice.go), WASI random_get a unit per byte it makes, and poll_oneoff, which is the
// host's own (poll.go), for its subscriptions and events and, with the real clock, a unit per
// nanosecond it sleeps, a sleep that ends when ctx does. Fuel is deterministic: the same call on the same instance history always spends
// the same fuel (Effects.Fuel), and stops at the same point. A start function is moved out of
// instantiation and run under InitFuel, so a module whose start function loops is refused by
// Compile.
//
// A call runs in time slices (slice.go): the counter holds at most sliceFuel units, and at the
// end of each slice the guest calls back into the host, which yields the processor (compiled
// guest code cannot be preempted: a long call would hold up the collector's stop-the-world and
// with it every goroutine), checks ctx and Runtime.Interrupt (a call stops there with ctx's
// error or ErrInterrupted) and hands out the next slice.
//
// The same rewrite bounds the guest's call stack, which wazero keeps in Go memory outside the
// linear memory (Limits.MaxCallDepth): call sets a second exported counter to the limit before
// the call, every guest function pays its frame from it at entry, and a trap with that counter
// negative becomes a *CallDepthError (errors.Is ErrCallDepth).
//
// wazero's context-done interruption is deliberately not used: it makes guest loops ~33× slower
// (DESIGN S21); fuel costs a few percent (BenchmarkCPUBound). An unmetered module (NoFuel) is
// neither bounded nor sliced. Host functions that wait are bounded by their own deadlines.
package modrt
