// Package abi holds the names, numbers and byte layouts shared by the wasmstream host and its
// guests, and an encoder and decoder for every layout. ABI.md next to this file is the
// byte-by-byte contract; this package is its executable form.
//
// The package imports only the standard library, and nothing in it allocates on a decode path
// except header slices: decoded byte fields are views into the buffer being decoded, valid as long
// as that buffer is. It is used unchanged by the host and by the Go guest SDK (standard Go wasip1
// and TinyGo).
package abi
