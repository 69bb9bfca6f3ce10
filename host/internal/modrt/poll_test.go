package modrt

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/abi"
)

// With the real clock granted, a poll_oneoff sleep is charged a fuel unit per nanosecond and
// ends with the call's context. Before, a sleep of an hour slept an hour, past any budget and
// any stop.
func TestPollSleepBounded(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	clock := Grants{RealClock: true}
	i := instantiate(t, compile(t, r, "hostcalls", Limits{Grants: clock}), InstanceConfig{})
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	_, err := i.Process(cctx, []abi.Record{hostcallsRec('S', 1)}, nil)
	cancel()
	if !errors.Is(err, ErrFuelExhausted) {
		t.Errorf("a sleep of an hour under the default budget: %v; want the budget exhausted", err)
	}
	// A budget large enough for the hour: the context ends the sleep.
	j := instantiate(t, compile(t, r, "hostcalls", Limits{Grants: clock, FuelPerRecord: 1 << 50}), InstanceConfig{})
	cctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = j.Process(cctx, []abi.Record{hostcallsRec('S', 1)}, nil)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a sleep of an hour whose context ends: %v; want the context's deadline", err)
	}
}

// poll_oneoff answers as wazero's did: a clock, an fd_read of stdin (always ready: it is
// empty) and an fd_write (ENOTSUP) each get their event, and nothing sleeps while a read is
// ready, real clock or not.
func TestPollAnswers(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	for _, g := range []Grants{{}, {RealClock: true}} {
		i := instantiate(t, compile(t, r, "hostcalls", Limits{Grants: g}), InstanceConfig{})
		eff, err := i.Process(ctx, []abi.Record{hostcallsRec('E', 1)}, newEnv(nil))
		if err != nil {
			t.Fatalf("real clock %v: %v", g.RealClock, err)
		}
		if len(eff.Writes) != 1 || len(eff.Writes[0].Value) != 104 {
			t.Fatalf("real clock %v: writes %+v; want the poll's answer", g.RealClock, eff.Writes)
		}
		v := eff.Writes[0].Value
		le := binary.LittleEndian
		if errno, n := le.Uint32(v), le.Uint32(v[4:]); errno != 0 || n != 3 {
			t.Errorf("real clock %v: errno %d, %d events; want 0 and 3", g.RealClock, errno, n)
		}
		var got []string
		for k := range 3 {
			e := v[8+32*k:][:32]
			got = append(got, string(rune('0'+le.Uint64(e)))+"/"+string(rune('0'+le.Uint16(e[8:])))+"/"+string(rune('0'+e[10])))
		}
		slices.Sort(got)
		// userdata/errno/type, as runes from '0': 11 fd_read ok, 12 fd_write ENOTSUP (58), 13 clock ok.
		want := []string{";/0/1", "</j/2", "=/0/0"}
		if !slices.Equal(got, want) {
			t.Errorf("real clock %v: events %q; want %q", g.RealClock, got, want)
		}
	}
}

// Subscriptions that run past the end of memory: EFAULT, and the call goes on.
func TestPollFault(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "hostcalls", Limits{}), InstanceConfig{})
	eff, err := i.Process(ctx, []abi.Record{hostcallsRec('F', 1)}, newEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Writes) != 1 || binary.LittleEndian.Uint32(eff.Writes[0].Value) != wasiEFAULT {
		t.Errorf("writes %+v; want the errno EFAULT (21) first", eff.Writes)
	}
}
