// Command fetch is a test guest for outbound HTTP (ABI 0.2 http_request): each record's value is
// a URL; the guest GETs it and emits "<status> <body>" to output "fetched", or
// "error <message>" when the request fails (not granted, unavailable, too large).
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o fetch.wasm .
package main

import (
	"strconv"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

func init() {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		resp, err := wasmstream.HTTPDo(&wasmstream.HTTPRequest{URL: string(r.Value())})
		if err != nil {
			return wasmstream.Emit("fetched", r.Key(), []byte("error "+err.Error()))
		}
		return wasmstream.Emit("fetched", r.Key(), append([]byte(strconv.Itoa(resp.Status)+" "), resp.Body...))
	})
}
