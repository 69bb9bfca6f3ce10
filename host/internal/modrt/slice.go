package modrt

import (
	"context"
	"errors"
	"runtime"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmstream/wasmstream/host/internal/fuel"
)

// Time slices. Compiled guest code cannot be preempted by Go: while a goroutine runs it, the
// collector cannot stop the world, and every other goroutine of the process waits once it asks
// to. A metered guest therefore gets its call's budget sliceFuel units at a time (fuel.Meter):
// at the end of each slice it calls back into the host (fuel.SliceModule), which yields the
// processor, checks that the call may go on (its context, Runtime.Interrupt) and hands out the
// next slice, or ends the call when the budget is spent. Fuel stays deterministic: slicing
// changes neither what a call spends nor where it stops.

// sliceFuel is the most fuel a guest spends between two returns to the host. A slice of a
// plain loop (the fastest fuel there is: 0.44-1.4 ns a unit on the shared 2-core development
// machine, TestSizedChargesStopLoops) takes 2-6 ms; a Go guest's coarser counts make its slices
// shorter. A return costs a host call and a runtime.Gosched, well under a microsecond: nothing
// measurable at one per 4·10^6 units (BenchmarkBatchProcess).
const sliceFuel = 1 << 22

// instantiateSliceModule registers the host side of the slice import.
func instantiateSliceModule(ctx context.Context, rt wazero.Runtime) error {
	_, err := rt.NewHostModuleBuilder(fuel.SliceModule).NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(sliceHost), []api.ValueType{api.ValueTypeI64}, []api.ValueType{api.ValueTypeI64}).
		Export(fuel.SliceFunc).
		Instantiate(ctx)
	return err
}

// sliceHost is the slice import: stack[0] is the guest's counter, negative, and becomes the
// counter to go on with (negative: the guest traps).
func sliceHost(ctx context.Context, _ api.Module, stack []uint64) {
	if i := instanceOf(ctx); i != nil {
		stack[0] = uint64(i.slice(int64(stack[0])))
	}
}

// slice ends a slice of the current call: see fuel.Meter.Refill. A call whose context is done or
// whose runtime was interrupted stops here with ErrInterrupted.
func (i *Instance) slice(v int64) int64 {
	if err := i.cctx.Context.Err(); err != nil {
		i.stopErr = err
		return -1
	}
	if i.interrupted != nil && i.interrupted.Load() {
		i.stopErr = ErrInterrupted
		return -1
	}
	c := i.meter.Refill(v)
	if c >= 0 {
		runtime.Gosched()
	}
	return c
}

// Host functions pay for the bytes they copy between guest memory and the host: what they read
// (view) and what they write back (copyOut, pages, responses), one unit per hostBytesPerUnit
// bytes, like the bulk memory instructions (package fuel). Without it a guest could loop on a
// 1 MiB state_get at a few units per iteration, for hours of CPU within a default budget.
const hostBytesPerUnit = 4

// errFuelSpent is the panic of a host function whose charge spent the call's budget: wazero
// turns it into the call's error, which Instance.call reports as a *FuelError.
var errFuelSpent = errors.New("fuel exhausted in a host function")

// chargeWrite charges n bytes the guest wrote to its stdout or stderr (WASI fd_write), like
// the bytes a host function copies.
func (i *Instance) chargeWrite(n int) {
	if i.phase == phaseIdle {
		return
	}
	i.moved = n
	i.chargeMoved()
}

// chargeRandom charges n bytes the guest's random source makes (WASI random_get,
// Grants.randSource) a unit each: the deterministic source takes about 2.5 ns a byte, so that
// at a unit per 4 bytes a random_get loop spent its budget in 10× the time of a plain loop.
// Without the charge a loop of random_get of 16 MiB ran for hours in one call, and no stop
// could end it: the call never reached the end of a time slice.
func (i *Instance) chargeRandom(n int) { i.chargeWrite(n * hostBytesPerUnit) }

// chargeMoved charges the bytes the host function just run copied (i.moved) to the call, from
// the counter as a guest charge would (the instrumented module keeps the counter in its global
// across host calls). When that spends the budget the call stops at once, at the same point
// every time; a call interrupted meanwhile stops too.
func (i *Instance) chargeMoved() {
	units := int64(i.moved / hostBytesPerUnit)
	i.moved = 0
	i.charge(units)
}

// charge charges units to the call, as chargeMoved does.
func (i *Instance) charge(units int64) {
	if i.fuel == nil || units <= 0 {
		return
	}
	v := int64(i.fuel.Get()) - units
	if v < 0 {
		v = i.slice(v)
	}
	i.fuel.Set(uint64(v))
	if v < 0 {
		panic(errFuelSpent)
	}
}
