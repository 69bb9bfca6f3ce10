// Package host is the embeddable wasmstream runtime: it runs stateful stream tasks written as
// WebAssembly modules.
//
// A Host is created with New from a Config (validated and copied; zero values are defaults),
// run once with Run and released with Close:
//
//	h, err := host.New(host.Config{DataDir: "data", Tasks: []host.TaskConfig{{
//		Name:   "wordcount",
//		Module: "wordcount.wasm",
//		Inputs: []host.InputConfig{{Path: "input.ndjson", KeyField: "user", ValueField: "text"}},
//		Output: host.OutputConfig{Type: host.OutputFile, Path: "out.ndjson"},
//	}}})
//	if err != nil { ... }          // every configuration problem, each naming its key
//	defer h.Close()
//	err = h.Run(ctx)               // until the inputs are exhausted, ctx is done, or a task fails
//
// Run reads each task's inputs, routes every record to its key's queue, hands batches of ready
// keys to a pool of wasm instances, applies what the guest did (state writes, outputs) when a
// call succeeds, and commits state, applied marks and input positions in one checkpoint on an
// interval and on the way out. A killed host resumes from its last checkpoint with exactly the
// state of processing every record once; outputs are delivered at least once. A task with a
// Kafka input may run as several loops on one host (TaskConfig.Loops), each its own member of
// the task's consumer group, to use more cores than one loop and its checkpoint writer can.
//
// While Run runs, Deploy replaces a task's module with a new version without stopping it (no
// record lost or processed twice, state kept; a module that fails validation changes nothing),
// Rollback and Activate go back to a version kept in the data directory, and Pause and Resume
// hold a task's batches, and RestartTask starts a task that halted again (a Kafka task with
// new clients) while the others run on; with Config.Admin.Addr set, an admin HTTP API offers
// the same. The active version survives restarts.
//
// Check validates a configuration and its modules without running anything; OpenState reads the
// state of a stopped host; Stats returns every task's figures (TaskStats, the same record the
// admin API serves as JSON). Config.WithDefaults shows every default; the configuration's
// enumerations are typed (Delivery, InputType, …). The development Kafka broker, on its own,
// is package devkafka. Nothing in this package's API exposes the wasm runtime, the store or
// any other dependency. See INTERNALS.md for the goroutines, ownership rules and invariants.
package host
