// Package host is the SDK's view of the wasmstream host: the host functions of ABI.md §4 (versions
// 0.1 and 0.2) as plain Go functions over byte slices.
//
// In a wasip1 build each function is a thin wrapper over a //go:wasmimport of module
// wasmstream_v0. In every other build the functions call Current, an in-process Host that a test
// harness installs (package wasmstreamtest), and the harness reaches the guest through Guest.
//
// Every function passes its slices to the host by pointer and length and returns the host's raw
// status (ABI.md §5); the host copies what it reads before returning, so the caller may reuse the
// memory at once. A nil or empty slice is passed as pointer 0 (or any pointer) with length 0.
package host
