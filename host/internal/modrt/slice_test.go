package modrt

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/fuel"
)

// Issue 22 item 1: a call looping for its whole budget hands control back to Go at the end of
// every slice, so the collector can stop the world while it runs: runtime.GC() from another
// goroutine returns long before the call ends. Before time slices it waited for the call.
func TestSliceLetsCollectorRun(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "spin", Limits{FuelPerRecord: 3_000_000_000})
	i := instantiate(t, m, InstanceConfig{})
	var gcs atomic.Int64
	done := make(chan error, 1)
	started := time.Now()
	go func() {
		_, err := i.Process(ctx, []abi.Record{spinRec(0xffffffff)}, nil)
		done <- err
	}()
	var worst time.Duration
	for {
		select {
		case err := <-done:
			asFuelError(t, err)
			call := time.Since(started)
			t.Logf("the call ran %v; %d collections meanwhile, the slowest %v", call, gcs.Load(), worst)
			if gcs.Load() < 3 {
				t.Errorf("%d collections completed during a %v call; want several (each waited for the call)", gcs.Load(), call)
			}
			return
		default:
		}
		start := time.Now()
		runtime.GC()
		worst = max(worst, time.Since(start))
		gcs.Add(1)
	}
}

// Runtime.Interrupt stops a call in progress at the end of its slice, with ErrInterrupted.
func TestInterruptStopsCall(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "spin", Limits{FuelPerRecord: 1 << 50})
	i := instantiate(t, m, InstanceConfig{})
	done := make(chan error, 1)
	go func() {
		_, err := i.Process(ctx, []abi.Record{spinRec(0xffffffff)}, nil)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the endless call returned before the interrupt: %v", err)
	case <-time.After(50 * time.Millisecond): // the call is running (a guard, not a synchronisation)
	}
	at := time.Now()
	r.Interrupt()
	err := <-done
	t.Logf("stopped %v after the interrupt", time.Since(at))
	if ce := asCallError(t, err); !errors.Is(err, ErrInterrupted) || !ce.Trap || !i.Broken() {
		t.Errorf("error %v (trap %v, broken %v); want ErrInterrupted, a trap, a broken instance", err, ce.Trap, i.Broken())
	}
}

// A call whose context ends stops at the end of its slice with the context's error.
func TestContextStopsCall(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "spin", Limits{FuelPerRecord: 1 << 50})
	i := instantiate(t, m, InstanceConfig{})
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := i.Process(cctx, []abi.Record{spinRec(0xffffffff)}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v; want the context's deadline", err)
	}
}

// Issue 22 item 2: loops whose every iteration does much work for few instructions — bulk
// memory and table instructions, host functions that copy a lot or do little, random_get — are
// charged by size or by call and stop
// within their budget, in about the time a plain loop takes to spend it. Before, a memory.fill
// loop ran 664 s under a budget that stops a plain loop in 0.1 s (these wait up to a minute,
// then fail: the context stops the call at its next slice).
func TestSizedChargesStopLoops(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	const budget = 100_000_000
	m := compile(t, r, "bulk", Limits{FuelPerRecord: budget})
	big := strings.Repeat("x", 1<<20)
	config := `{"pad":"` + strings.Repeat("y", 120_000) + `"}`
	env := newEnv(map[string]map[string]string{"k": {"n": big}})
	var ref time.Duration
	for _, tc := range []struct{ mode, what string }{
		{"l", "a plain loop"}, {"f", "memory.fill of 32 MiB"}, {"c", "memory.copy of 16 MiB"},
		{"i", "memory.init of 4 KiB"}, {"t", "table.fill of 10,000"}, {"T", "table.copy of 10,000"},
		{"s", "state_get of 1 MiB"}, {"g", "config_get of 120 KB"}, {"w", "fd_write of 1 MiB"},
	} {
		i := instantiate(t, m, InstanceConfig{Config: []byte(config)})
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		start := time.Now()
		_, err := i.Process(cctx, []abi.Record{rec("k", []byte(tc.mode))}, env)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, ErrFuelExhausted) {
			t.Errorf("%s in a loop: %v after %v; want the budget exhausted", tc.what, err, took)
			continue
		}
		if tc.mode == "l" {
			ref = took
		}
		t.Logf("%-22s stopped by its budget of %d after %7.1f ms (%.1f× a plain loop)", tc.what, budget,
			float64(took.Microseconds())/1000, float64(took)/float64(ref))
	}
	// Host calls that do little (or make many bytes: random_get) cost fuel.HostCallUnits each.
	h := compile(t, r, "hostcalls", Limits{FuelPerRecord: budget})
	for _, tc := range []struct {
		mode byte
		what string
	}{{'n', "now_ms"}, {'k', "clock_time_get"}, {'p', "poll_oneoff"}, {'r', "random_get of 1 MiB"}, {'P', "poll_oneoff of 100,000"}} {
		i := instantiate(t, h, InstanceConfig{})
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		start := time.Now()
		_, err := i.Process(cctx, []abi.Record{hostcallsRec(tc.mode, 0xffffffff)}, nil)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, ErrFuelExhausted) {
			t.Errorf("%s in a loop: %v after %v; want the budget exhausted", tc.what, err, took)
			continue
		}
		t.Logf("%-22s stopped by its budget of %d after %7.1f ms (%.1f× a plain loop)", tc.what, budget,
			float64(took.Microseconds())/1000, float64(took)/float64(ref))
	}
}

// The slice import shifts every defined function's index by one: calls, ref.func in code and
// globals, element segments, the start function, exports and the name section still reach the
// function they named (remap.wat checks its own sums), and a trap names the function it is in.
func TestSliceImportRemapsIndices(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	// A name section naming function 5, $boom (after the import, $start, $one, $two, $three).
	names := []byte{1, 7, 1, 5, 4, 'b', 'o', 'o', 'm'} // subsection 1, size, 1 entry: 5 "boom"
	custom := append([]byte{4, 'n', 'a', 'm', 'e'}, names...)
	wasm := append(append(fixture(t, "remap"), 0, byte(len(custom))), custom...)
	for _, lim := range []Limits{{}, {FuelPerRecord: NoFuel}} {
		m, err := r.Compile(ctx, wasm, lim)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(ctx)
		i := instantiate(t, m, InstanceConfig{})
		if _, err := i.Process(ctx, []abi.Record{rec("k", []byte("ok"))}, nil); err != nil {
			t.Errorf("metered %v: %v", m.Info().Metered, err)
		}
		_, err = i.Process(ctx, []abi.Record{rec("k", []byte("boom"))}, nil)
		if ce := asCallError(t, err); !ce.Trap || !strings.Contains(err.Error(), "boom") {
			t.Errorf("metered %v: the trap %v does not name the function $boom", m.Info().Metered, err)
		}
	}
}

// hostcallsRec is a record for the hostcalls fixture: n calls of the kind mode.
func hostcallsRec(mode byte, n uint32) abi.Record {
	return rec("k", binary.LittleEndian.AppendUint32([]byte{mode}, n))
}

// Host calls are paid for: each call of an imported function costs fuel.HostCallUnits,
// random_get a unit per byte it makes besides, poll_oneoff a unit per 4 bytes of its
// subscriptions and events.
// Before, a call cost one unit whatever it did: a loop of now_ms ran 9.7 s a record at the
// default budget (100× a plain loop), and one of random_get of 16 MiB never ended, the call
// never reaching the end of a time slice, so that no stop could end it either; nor did one of
// poll_oneoff of 500,000 subscriptions.
func TestHostCallsCharged(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "hostcalls", Limits{}), InstanceConfig{})
	spent := func(mode byte, n uint32) int64 {
		t.Helper()
		eff, err := i.Process(ctx, []abi.Record{hostcallsRec(mode, n)}, nil)
		if err != nil {
			t.Fatalf("%c × %d: %v", mode, n, err)
		}
		return eff.Fuel
	}
	for _, tc := range []struct {
		mode    byte
		what    string
		n       uint32
		perCall int64
	}{
		{'n', "now_ms", 50, fuel.HostCallUnits},
		{'k', "clock_time_get", 50, fuel.HostCallUnits},
		{'p', "poll_oneoff", 50, fuel.HostCallUnits},
		{'r', "random_get of 1 MiB", 50, fuel.HostCallUnits + 1<<20},
		{'P', "poll_oneoff of 100,000 subscriptions", 10, fuel.HostCallUnits + 100_000*(48+32)/hostBytesPerUnit},
	} {
		n := int64(tc.n)
		if per := (spent(tc.mode, tc.n) - spent(tc.mode, 0)) / n; per < tc.perCall {
			t.Errorf("a call of %s cost %d fuel units; want at least %d", tc.what, per, tc.perCall)
		}
	}
}

// A loop of random_get stops within its budget however large its reads, and a stop ends it at
// its next slice (before, it ran for hours past its context).
func TestRandomLoopStopped(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	for _, lim := range []Limits{{FuelPerRecord: 100_000_000}, {FuelPerRecord: 1 << 50}} {
		i := instantiate(t, compile(t, r, "hostcalls", lim), InstanceConfig{})
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := i.Process(cctx, []abi.Record{hostcallsRec('r', 0xffffffff)}, nil)
		cancel()
		if !errors.Is(err, ErrFuelExhausted) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("budget %d: %v; want the budget exhausted or the context's deadline", lim.FuelPerRecord, err)
		}
	}
}

// Reads of a granted file are charged by the size asked for, like the bytes a host function
// copies: before, a loop of fd_pread of 1 MiB cost a few units an iteration.
func TestFileReadsCharged(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "hostcalls", Limits{Grants: Grants{Dirs: []DirGrant{{Host: dir, Guest: "/data"}}}}), InstanceConfig{})
	spent := func(n uint32) int64 {
		t.Helper()
		eff, err := i.Process(ctx, []abi.Record{hostcallsRec('f', n)}, nil)
		if err != nil {
			t.Fatalf("fd_pread × %d: %v", n, err)
		}
		return eff.Fuel
	}
	const n = 50
	if per, want := (spent(n)-spent(0))/n, int64(fuel.HostCallUnits+1<<20/hostBytesPerUnit); per < want {
		t.Errorf("an fd_pread of 1 MiB cost %d fuel units; want at least %d", per, want)
	}
}

// An instance holds at most MaxOpenFiles files open in its granted directories: an open beyond
// fails (EAGAIN). Before, a guest opening without closing took
// every descriptor of the host process (20,000) within one call.
func TestOpenFilesBounded(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "hostcalls", Limits{Grants: Grants{Dirs: []DirGrant{{Host: dir, Guest: "/data"}}}}), InstanceConfig{})
	eff, err := i.Process(ctx, []abi.Record{hostcallsRec('o', 1000)}, newEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Writes) != 1 || len(eff.Writes[0].Value) != 8 {
		t.Fatalf("writes %+v", eff.Writes)
	}
	opened, errno := binary.LittleEndian.Uint32(eff.Writes[0].Value), binary.LittleEndian.Uint32(eff.Writes[0].Value[4:])
	if opened >= MaxOpenFiles || opened < MaxOpenFiles-2 || errno != 6 { // EAGAIN
		t.Errorf("1000 opens without a close: %d succeeded, the last errno %d; want %d less the preopen, then EAGAIN (6)", opened, errno, MaxOpenFiles)
	}
}
