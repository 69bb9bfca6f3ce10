//go:build !wasip1

package wasmstreamtest_test

import (
	"testing"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

// TestTombstoneThroughHarness (ABI 0.5): a record with a null value is ValueNull and its empty
// Value apart from an empty one; a handler keeping a table deletes the key's state on it and
// emits a tombstone (EmitTombstone, and EmitWith with ValueNull), which the harness reports as
// a null value; an empty value stays an empty value, on the way in and out.
func TestTombstoneThroughHarness(t *testing.T) {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		st := r.State()
		if r.ValueNull() {
			if err := st.Delete("v"); err != nil {
				return err
			}
			if err := wasmstream.EmitTombstone("table", r.Key()); err != nil {
				return err
			}
			return wasmstream.EmitWith(wasmstream.Output{Name: "table", Key: r.Key(), Value: []byte("ignored"), ValueNull: true,
				Headers: []wasmstream.Header{{Name: []byte("h"), Value: []byte("1")}}, Timestamp: 5})
		}
		if err := st.Put("v", r.Value()); err != nil {
			return err
		}
		return wasmstream.Emit("table", r.Key(), r.Value())
	})
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	if err := h.Init(); err != nil {
		t.Fatal(err)
	}
	res, err := h.Process(wasmstreamtest.Input{Key: []byte("a"), Value: []byte("1")}, wasmstreamtest.Input{Key: []byte("b"), Value: []byte{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.State) != 2 || len(res.Outputs) != 2 || res.Outputs[1].ValueNull || res.Outputs[1].Value == nil {
		t.Fatalf("state %v, outputs %v: want a and b kept, b's empty value emitted as empty", res.State, res.Outputs)
	}
	res, err = h.Process(wasmstreamtest.Input{Key: []byte("a"), ValueNull: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.State) != 1 || string(res.State[0].Key) != "b" {
		t.Errorf("state after a's tombstone: %v; want only b's", res.State)
	}
	if len(res.Outputs) != 2 || !res.Outputs[0].ValueNull || res.Outputs[0].Value != nil || string(res.Outputs[0].Key) != "a" ||
		!res.Outputs[1].ValueNull || res.Outputs[1].Value != nil || len(res.Outputs[1].Headers) != 1 || res.Outputs[1].Timestamp != 5 {
		t.Errorf("outputs %v; want two tombstones of a, the second with a header and ts 5", res.Outputs)
	}
}
