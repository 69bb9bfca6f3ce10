// Package e2e holds the end-to-end tests that drive the real wasmstream binary: the crash test
// (SIGKILL at random moments, restart, exact state) and the example runs.
package e2e
