package modrt

import (
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/fuel"
)

// spinRec is a record for the spin fixture: n loop iterations, or forever when n is -1.
func spinRec(n uint32) abi.Record { return rec("k", binary.LittleEndian.AppendUint32(nil, n)) }

func asFuelError(t testing.TB, err error) (*CallError, *FuelError) {
	t.Helper()
	ce := asCallError(t, err)
	var fe *FuelError
	if !errors.As(err, &fe) || !errors.Is(err, ErrFuelExhausted) {
		t.Fatalf("error %v is not a *FuelError", err)
	}
	return ce, fe
}

// An infinite loop is stopped by its budget, with an error naming the limit; the instance is
// broken and a new one works.
func TestFuelStopsInfiniteLoop(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "spin", Limits{FuelPerRecord: 1_000_000})
	i := instantiate(t, m, InstanceConfig{Task: "spin"})
	_, err := i.Process(ctx, []abi.Record{spinRec(0xffffffff), spinRec(1), spinRec(2)}, nil)
	ce, fe := asFuelError(t, err)
	if !ce.Trap || ce.Func != abi.ExportProcess || !i.Broken() {
		t.Errorf("call error %+v, broken %v; want a trap that breaks the instance", ce, i.Broken())
	}
	if *fe != (FuelError{Budget: 3_000_000, PerRecord: 1_000_000, Records: 3}) {
		t.Errorf("fuel error %+v; want the budget of 3 records", fe)
	}
	want := `task "spin": wasmstream_process stopped: call exceeded its CPU budget of 3000000 fuel units (fuel_per_record=1000000 × 3 records)`
	if err.Error() != want {
		t.Errorf("message\n got %s\nwant %s", err, want)
	}
	if _, err := i.Process(ctx, []abi.Record{spinRec(5)}, nil); !errors.Is(err, ErrBroken) {
		t.Errorf("process after the fuel trap: %v; want ErrBroken", err)
	}
	j := instantiate(t, m, InstanceConfig{})
	if _, err := j.Process(ctx, []abi.Record{spinRec(1000)}, nil); err != nil {
		t.Errorf("a fresh instance: %v", err)
	}
}

// Fuel is deterministic and counts work: the same call always spends the same fuel, a loop of
// n iterations spends a fixed amount per iteration, and a budget of exactly what a call
// spends is enough while one unit less is not.
func TestFuelDeterministic(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "spin", Limits{}), InstanceConfig{})
	spent := func(i *Instance, n uint32) int64 {
		t.Helper()
		eff, err := i.Process(ctx, []abi.Record{spinRec(n)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return eff.Fuel
	}
	f1, f2, f3 := spent(i, 1000), spent(i, 2000), spent(i, 3000)
	if f1 <= 1000 || f2-f1 != f3-f2 || f2-f1 < 1000 {
		t.Errorf("fuel for 1000, 2000, 3000 iterations: %d, %d, %d; want > 1 unit per iteration, linear", f1, f2, f3)
	}
	if again := spent(i, 1000); again != f1 {
		t.Errorf("the same call spent %d, then %d", f1, again)
	}
	exact := instantiate(t, compile(t, r, "spin", Limits{FuelPerRecord: f1}), InstanceConfig{})
	if got := spent(exact, 1000); got != f1 {
		t.Errorf("with a budget of exactly %d the call spent %d", f1, got)
	}
	short := instantiate(t, compile(t, r, "spin", Limits{FuelPerRecord: f1 - 1}), InstanceConfig{})
	_, err := short.Process(ctx, []abi.Record{spinRec(1000)}, nil)
	if _, fe := asFuelError(t, err); fe.Budget != f1-1 {
		t.Errorf("fuel error %+v", fe)
	}
}

// Unbounded recursion is stopped: by the budget when it is small, by the call-depth bound
// (Limits.MaxCallDepth) otherwise, long before the runtime's own stack limit. Either way the host
// survives and the instance is replaced.
func TestFuelStopsRecursion(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	small := instantiate(t, compile(t, r, "recurse", Limits{FuelPerRecord: 10_000}), InstanceConfig{})
	_, err := small.Process(ctx, []abi.Record{rec("k", nil)}, nil)
	if _, fe := asFuelError(t, err); fe.Budget != 10_000 {
		t.Errorf("fuel error %+v", fe)
	}
	deep := instantiate(t, compile(t, r, "recurse", Limits{}), InstanceConfig{})
	_, err = deep.Process(ctx, []abi.Record{rec("k", nil)}, nil)
	ce := asCallError(t, err)
	var de *CallDepthError
	if !ce.Trap || !deep.Broken() || !errors.As(err, &de) || de.Limit != DefaultMaxCallDepth {
		t.Errorf("deep recursion: %v; want a call depth trap at the default limit", err)
	}
}

// A start function that loops forever is stopped while the module is compiled: the module is
// refused with the limit named, and nothing hangs.
func TestFuelStartFunctionLoops(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	_, err := r.Compile(ctx, fixture(t, "startloop"), Limits{InitFuel: 1_000_000})
	var me *ModuleError
	if !errors.As(err, &me) || !errors.Is(err, ErrFuelExhausted) {
		t.Fatalf("Compile = %v; want a *ModuleError for the exhausted budget", err)
	}
	if want := "start function stopped: call exceeded its CPU budget of 1000000 fuel units (init_fuel=1000000)"; me.Reason() != want {
		t.Errorf("reason %q, want %q", me.Reason(), want)
	}
}

// wasmstream_init that loops forever fails every Instantiate with the start-up budget.
func TestFuelInitLoops(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "initloop", Limits{InitFuel: 1_000_000})
	_, err := m.Instantiate(ctx, InstanceConfig{Task: "il"})
	ce, fe := asFuelError(t, err)
	if ce.Func != abi.ExportInit || fe.Budget != 1_000_000 || fe.Records != 0 {
		t.Errorf("call error %+v, fuel error %+v", ce, fe)
	}
}

// A module exporting a name the metering adds is refused with a clear message.
func TestFuelReservedExport(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	_, err := r.Compile(ctx, fixture(t, "reserved"), Limits{})
	var me *ModuleError
	if !errors.As(err, &me) || me.Reason() != `cannot be fuel-metered: the module exports "`+fuel.GlobalExport+`", a name reserved for fuel metering` {
		t.Fatalf("Compile = %v", err)
	}
	if _, err := r.Compile(ctx, fixture(t, "reserved"), Limits{FuelPerRecord: NoFuel}); err != nil {
		t.Errorf("unmetered: %v", err)
	}
}

// Metering is off with FuelPerRecord NoFuel: the module runs unmodified and reports no fuel.
func TestFuelDisabled(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "spin", Limits{FuelPerRecord: NoFuel})
	if m.Info().Metered || m.Info().StartupFuel != 0 {
		t.Errorf("info %+v; want not metered", m.Info())
	}
	i := instantiate(t, m, InstanceConfig{})
	eff, err := i.Process(ctx, []abi.Record{spinRec(100_000)}, nil)
	if err != nil || eff.Fuel != 0 {
		t.Errorf("Process = %+v, %v; want no fuel reported", eff, err)
	}
	if metered := compile(t, r, "spin", Limits{}); !metered.Info().Metered {
		t.Error("a default module is not metered")
	}
}

// Real guests — standard Go, Rust — compute exactly the same metered and unmetered, spend the
// same fuel in two instances, and an infinite loop in a Go guest is stopped by the default budget.
func TestFuelRealGuests(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	for _, g := range cpuGuests[:3] {
		t.Run(g.name, func(t *testing.T) {
			wasm := g.wasm(t)
			plain, err := r.Compile(ctx, wasm, Limits{FuelPerRecord: NoFuel})
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close(ctx)
			metered, err := r.Compile(ctx, wasm, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			defer metered.Close(ctx)
			if su := metered.Info().StartupFuel; su <= 0 || su > DefaultInitFuel/100 {
				t.Errorf("start-up spent %d fuel; want some, well under the default budget", su)
			}
			recs := g.recs()
			want, err := instantiate(t, plain, InstanceConfig{}).Process(ctx, recs, newEnv(nil))
			if err != nil {
				t.Fatal(err)
			}
			var fuels []int64
			for k := 0; k < 2; k++ {
				eff, err := instantiate(t, metered, InstanceConfig{}).Process(ctx, recs, newEnv(nil))
				if err != nil {
					t.Fatal(err)
				}
				if fmtOutputs(eff.Outputs) != fmtOutputs(want.Outputs) || len(eff.Writes) != len(want.Writes) {
					t.Fatalf("metered outputs differ:\n got %.300s\nwant %.300s", fmtOutputs(eff.Outputs), fmtOutputs(want.Outputs))
				}
				fuels = append(fuels, eff.Fuel)
			}
			if fuels[0] <= 0 || fuels[0] != fuels[1] {
				t.Errorf("fuel of two fresh instances: %v; want equal and positive", fuels)
			}
			t.Logf("%d records: %d fuel (%d per record)", len(recs), fuels[0], fuels[0]/int64(len(recs)))
		})
	}
	t.Run("go-loop", func(t *testing.T) {
		m, err := r.Compile(ctx, goGuest("testguests/hostile")(t), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(ctx)
		i := instantiate(t, m, InstanceConfig{Task: "hostile"})
		_, err = i.Process(ctx, []abi.Record{rec("k", []byte("loop"))}, nil)
		if _, fe := asFuelError(t, err); fe.Budget != DefaultFuelPerRecord {
			t.Errorf("fuel error %+v", fe)
		}
		_, err = i.Process(ctx, []abi.Record{rec("k", []byte("hello"))}, nil)
		if !errors.Is(err, ErrBroken) {
			t.Errorf("after the loop: %v", err)
		}
	})
}

// The rewriter handles every module of the repository's fixtures (all valid ones compile
// metered and unmetered alike).
func TestFuelFixturesCompile(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	for _, name := range []string{"driver", "badptr", "growbomb", "wasi", "trap", "spin", "start", "recurse", "initloop"} {
		if _, err := os.Stat("testdata/" + name + ".wasm"); err != nil {
			t.Fatal(err)
		}
		compile(t, r, name, Limits{InitFuel: 10_000_000})
	}
}

// A start function runs exactly once per instance, metered (moved out of the start section) or
// not.
func TestFuelStartFunctionRunsOnce(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	for _, lim := range []Limits{{}, {FuelPerRecord: NoFuel}} {
		i := instantiate(t, compile(t, r, "start", lim), InstanceConfig{})
		for k := 0; k < 2; k++ {
			eff, err := i.Process(ctx, []abi.Record{rec("k", nil)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := le32s(eff.Outputs[0].Value); !slices.Equal(got, []int32{1}) {
				t.Errorf("metered %v: the start function ran %v times", lim.metered(), got)
			}
		}
	}
}
