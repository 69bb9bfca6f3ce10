// Package e2e holds the end-to-end tests that drive the real wasmstream binary: the crash tests
// (SIGKILL at random moments, restart, exact state: over a file, over Kafka, with timers, across
// hosts, and while deploys arrive), the storage damage tests and the example runs.
//
// The processes the tests start share one compilation cache, the host tests' (TestMain sets
// WASMSTREAM_CACHE_DIR), so that a module is compiled once per run of the package rather than
// once per fresh data directory.
package e2e
