// Command timers is a test guest for the host's timer, watermark, tick and migration tests; see
// package lib for what it does. Its state version defaults to 0.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o timers.wasm .
package main

import "github.com/wasmstream/wasmstream/examples/wasm/testguests/timers/lib"

func main() {}

func init() { lib.Register(0) }
