package modrt

import (
	"errors"
	"slices"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

// fail_permanent (ABI 0.4, §4.22) fails the call permanently whatever the export returns, with
// the guest's message; a call whose fail_permanent had a bad pointer recorded nothing and fails
// as an ordinary failure.
func TestFailPermanent(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "failperm", Limits{}), InstanceConfig{Task: "fp"})
	one := func(v string) []abi.Record {
		return []abi.Record{{Source: []byte("s"), Key: []byte("k"), Value: []byte(v), Timestamp: -1}}
	}
	for _, v := range []string{"0", "1"} {
		_, err := i.Process(ctx, one(v), nil)
		var ce *CallError
		if !errors.As(err, &ce) || !ce.Permanent || ce.Trap || ce.GuestMessage != "bad record" || !errors.Is(err, ErrFailedPermanently) {
			t.Fatalf("value %s: error %v (%+v); want a permanent failure with the guest's message", v, err, ce)
		}
		if want := `task "fp": wasmstream_process failed permanently (fail_permanent: not retried); guest says "bad record"`; err.Error() != want {
			t.Errorf("message\n got %s\nwant %s", err, want)
		}
	}
	_, err := i.Process(ctx, one("f"), nil)
	var ce *CallError
	if !errors.As(err, &ce) || ce.Permanent || ce.Code != 1 || !errors.Is(err, ErrGuestFailed) || ce.GuestMessage != "bad record" {
		t.Fatalf("bad pointer: error %v; want an ordinary failure (returned 1)", err)
	}
	if i.Broken() {
		t.Error("a permanent failure broke the instance")
	}
}

// TestFailPermanentNeedsABI04: a guest declaring ABI 0.3 may not import fail_permanent.
func TestFailPermanentNeedsABI04(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	_, err := r.Compile(ctx, fixture(t, "failperm03"), Limits{})
	var me *ModuleError
	if !errors.As(err, &me) {
		t.Fatalf("error %v (%T), want a *ModuleError", err, err)
	}
	want := []string{"imports wasmstream_v0.fail_permanent, added in ABI 0.4, but declares ABI 0.3"}
	if !slices.Equal(me.Problems, want) {
		t.Errorf("problems %q, want %q", me.Problems, want)
	}
}
