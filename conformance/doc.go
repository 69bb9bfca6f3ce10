// Package conformance is the cross-language conformance suite of wasmstream guest SDKs. It has no
// API: its tests run every case under cases/ through the real host with the Go and the Rust
// implementation of a guest contract and compare outputs, state and dead letters with the
// expected files, which a reference model in the tests produces. README.md defines the contracts
// and the case format, and says how to run the suite against another SDK's module.
package conformance
