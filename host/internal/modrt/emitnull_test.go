package modrt

import (
	"errors"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

// TestEmitNullValue (ABI 0.5, §4.5): a guest declaring 0.5 emits a null value with val_len -1
// (val_ptr ignored): the Output is ValueNull with a nil Value, and an empty value emitted next
// stays empty and not null. A guest declaring 0.4 that passes -1 gets ERR_OUT_OF_BOUNDS, the
// error of any negative length before 0.5, and its call fails with nothing emitted.
func TestEmitNullValue(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	recs := []abi.Record{{Source: []byte("s"), Key: []byte("k"), Value: []byte("v"), Timestamp: -1}}

	i := instantiate(t, compile(t, r, "emitnull05", Limits{}), InstanceConfig{Task: "t"})
	eff, err := i.Process(ctx, recs, nil)
	if err != nil {
		t.Fatalf("0.5 guest: %v", err)
	}
	if len(eff.Outputs) != 2 {
		t.Fatalf("0.5 guest: %d outputs, want 2", len(eff.Outputs))
	}
	if o := eff.Outputs[0]; !o.ValueNull || o.Value != nil || string(o.Key) != "k" || o.Name != "o" || o.Timestamp != 7 {
		t.Errorf("first output %+v, want output o, key k, a null value, ts 7", o)
	}
	if o := eff.Outputs[1]; o.ValueNull || o.Value == nil || len(o.Value) != 0 {
		t.Errorf("second output %+v, want an empty value, not null", o)
	}

	i = instantiate(t, compile(t, r, "emitnull04", Limits{}), InstanceConfig{Task: "t"})
	_, err = i.Process(ctx, recs, nil)
	var ce *CallError
	if !errors.As(err, &ce) || ce.Code != -int32(abi.ErrOutOfBounds) {
		t.Fatalf("0.4 guest: error %v; want the call failed with the guest's return of 2 (emit said ERR_OUT_OF_BOUNDS)", err)
	}
}
