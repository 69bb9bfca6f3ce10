//go:build !wasip1

package main

import (
	"testing"

	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

func TestSnoopIsRefused(t *testing.T) {
	res, err := wasmstreamtest.Run(wasmstreamtest.Options{}, []wasmstreamtest.Input{
		{Key: []byte("alice"), Timestamp: 7}, {Key: []byte("bob"), Timestamp: 8}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != 8 {
		t.Fatalf("%d outputs, want 8", len(res.Outputs))
	}
	for i, o := range res.Outputs {
		key := []string{"alice", "bob"}[i/4]
		if o.Name != "errors" || string(o.Key) != key || string(o.Value) != "ERR_KEY_NOT_IN_BATCH" || o.Timestamp != int64(7+i/4) {
			t.Errorf("output %d: %v", i, o)
		}
	}
	if len(res.State) != 0 {
		t.Fatalf("state %v", res.State)
	}
}

// When the batch also holds the other key, the host allows the access: the names show it.
func TestSnoopInScope(t *testing.T) {
	res, err := wasmstreamtest.Run(wasmstreamtest.Options{}, []wasmstreamtest.Input{
		{Key: []byte("a")}, {Key: []byte("a-other")}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ERR_NOT_FOUND", "OK", "OK", "OK"}
	for i, w := range want {
		if string(res.Outputs[i].Value) != w {
			t.Errorf("output %d: %v, want %s", i, res.Outputs[i], w)
		}
	}
}
