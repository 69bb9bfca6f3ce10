// Package e2e holds the end-to-end tests that drive the real wasmstream binary: the crash tests
// (SIGKILL at random moments, restart, exact state: over a file, over Kafka, with timers, across
// hosts, and while deploys arrive), the storage damage tests and the example runs.
package e2e
