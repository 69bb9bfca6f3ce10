//go:build !wasip1

package main

import (
	"errors"
	"testing"

	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

func TestTrapper(t *testing.T) {
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	if err := h.Init(); err != nil {
		t.Fatal(err)
	}
	res, err := h.Process(wasmstreamtest.Input{Key: []byte("k"), Value: []byte("hi"), Timestamp: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != 1 || res.Outputs[0].Name != "echo" || string(res.Outputs[0].Key) != "k" ||
		string(res.Outputs[0].Value) != "hi" || res.Outputs[0].Timestamp != 3 {
		t.Fatalf("outputs %v", res.Outputs)
	}
	_, err = h.Process(wasmstreamtest.Input{Key: []byte("k"), Value: []byte("hi")},
		wasmstreamtest.Input{Key: []byte("k"), Value: []byte("kaboom!")})
	var ce *wasmstreamtest.CallError
	if !errors.As(err, &ce) || ce.Panic == nil {
		t.Fatalf("want a trap, got %v", err)
	}
}
