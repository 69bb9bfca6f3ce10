package modrt

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

// Tests of units of work (unit.go): Instance.Run over records, firings, ticks and migrations.

func records(recs ...abi.Record) Step { return Step{Kind: StepRecords, Records: recs} }

func firings(fs ...abi.Firing) Step { return Step{Kind: StepFirings, Firings: fs} }

func firing(key, name string, payload *prog) abi.Firing {
	f := abi.Firing{Partition: 1, Time: 10, Key: []byte(key), Name: []byte(name)}
	if payload != nil {
		f.Payload = payload.bytes()
	}
	return f
}

func fmtWrites(ws []Write) string {
	var b strings.Builder
	for _, w := range ws {
		if w.Delete {
			fmt.Fprintf(&b, "{del %s/%s}", w.Key, w.Name)
			continue
		}
		fmt.Fprintf(&b, "{%s/%s=%q}", w.Key, w.Name, w.Value)
	}
	return b.String()
}

func TestRunSteps(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver02", Limits{}), InstanceConfig{})
	env := newEnv(map[string]map[string]string{"k": {"seed": "s"}})

	unit := func(last *prog) *Unit {
		return &Unit{Watermark: 5, Steps: []Step{
			records(rec("k", new(prog).put("k", "a", "1").emit("out", "k", "r1", nil, -1).bytes())),
			firings(firing("k", "f", new(prog).
				get("k", "a", scratch, 8).emitLast("seen", scratch). // the first step's write
				put("k", "b", "2").
				timerSet("k", "g", abi.DomainEvent, 20, "x"))),
			records(rec("k", last.bytes())),
		}}
	}
	ok := new(prog).get("k", "b", scratch, 8).emitLast("seen", scratch).
		get("k", "seed", scratch, 8).emitLast("seen", scratch).
		emit("out", "k", "r2", nil, -1)
	eff, err := i.Run(ctx, unit(ok), env)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmtOutputs(eff.Outputs),
		`{out "k"="r1" ts=1234}{seen ""="1" ts=1234}{seen ""="2" ts=1234}{seen ""="s" ts=1234}{out "k"="r2" ts=1234}`; got != want {
		t.Errorf("outputs\n got %s\nwant %s", got, want)
	}
	if got, want := fmtWrites(eff.Writes), `{k/a="1"}{k/b="2"}`; got != want {
		t.Errorf("writes %s, want %s", got, want)
	}
	if got, want := fmtTimers(eff.Timers), `{set "k"/"g" d=1 due=20 "x"}`; got != want {
		t.Errorf("timers %s, want %s", got, want)
	}
	if eff.Fuel <= 0 {
		t.Errorf("fuel %d: the steps' fuel is not counted", eff.Fuel)
	}

	// A failing last step discards the effects of every step.
	eff, err = i.Run(ctx, unit(new(prog).emit("out", "k", "late", nil, -1).fail("boom").ret(3)), env)
	ce := asCallError(t, err)
	if ce.Func != abi.ExportProcess || ce.Code != 3 || ce.GuestMessage != "boom" || !errors.Is(err, ErrGuestFailed) || ce.Trap {
		t.Errorf("error %+v", ce)
	}
	if !reflect.DeepEqual(eff, Effects{}) {
		t.Errorf("effects of a failed unit: %+v", eff)
	}
	if i.Broken() {
		t.Fatal("broken by a guest failure")
	}

	// A failing middle step: the steps after it do not run.
	rs := observe(i)
	u := &Unit{Steps: []Step{
		records(rec("k", new(prog).put("k", "a", "1").bytes())),
		firings(firing("k", "f", new(prog).fail("no").ret(5))),
		records(rec("k", new(prog).log(abi.LevelInfo, "ran").bytes())),
	}}
	eff, err = i.Run(ctx, u, env)
	ce = asCallError(t, err)
	if ce.Func != abi.ExportOnTimer || ce.Code != 5 || ce.GuestMessage != "no" {
		t.Errorf("error %+v", ce)
	}
	if !reflect.DeepEqual(eff, Effects{}) {
		t.Errorf("effects of a failed unit: %+v", eff)
	}
	if got := results(*rs, hfLog); len(got) != 0 {
		t.Errorf("the step after the failure ran: log %v", got)
	}

	// Nothing of a failed unit leaks into the next one.
	rs = observe(i)
	eff, err = i.Run(ctx, &Unit{Steps: []Step{records(rec("k", new(prog).get("k", "a", scratch, 8).get("k", "b", scratch, 8).bytes()))}}, env)
	if err != nil {
		t.Fatal(err)
	}
	nf := int64(abi.ErrNotFound)
	if got := results(*rs, hfStateGet); !slices.Equal(got, []int64{nf, nf}) || len(eff.Writes)+len(eff.Outputs)+len(eff.Timers) != 0 {
		t.Errorf("after a failed unit: state_get %v, effects %+v", got, eff)
	}
}

func TestRunScopeIsTheUnion(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver02", Limits{}), InstanceConfig{})
	rs := observe(i)
	// The records step may use the keys of the firings and the migration of the same unit.
	p := new(prog).put("f", "n", "1").put("m", "n", "2").put("r", "n", "3").put("other", "n", "4").
		timerSet("f", "t", 0, 0, "").keys(nil, scratch, 64)
	u := &Unit{Steps: []Step{
		{Kind: StepMigrate, Migrate: abi.Migrate{From: 2, To: 2, Key: []byte("m")}},
		records(rec("r", p.bytes())),
		firings(firing("f", "t", nil)),
	}}
	if _, err := i.Run(ctx, u, newKeyEnv(nil)); err != nil {
		t.Fatal(err)
	}
	// The migration step's own calls come first (state_put, emit).
	want := []hostResult{{hfStatePut, 0}, {hfEmit, 0},
		{hfStatePut, 0}, {hfStatePut, 0}, {hfStatePut, 0}, {hfStatePut, int64(abi.ErrKeyNotInBatch)},
		{hfTimerSet, 0}, {hfStateKeys, int64(abi.ErrNotAllowed)}}
	if !slices.Equal(*rs, want) {
		t.Errorf("results\n got %v\nwant %v", *rs, want)
	}
}

func TestRunLiveFirings(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver02", Limits{}), InstanceConfig{})
	out := func(s string) *prog { return new(prog).emit("fired", "", s, nil, -1) }

	fs := []abi.Firing{
		firing("k", "t", out("stale: set earlier")),
		firing("k", "u", out("k/u")),
		firing("k2", "t", out("k2/t")),
		firing("k", "d", out("stale: deleted earlier")),
		firing("k", "later", out("k/later")),
	}
	orig := slices.Clone(fs)
	u := &Unit{Steps: []Step{
		records(rec("k", new(prog).timerSet("k", "t", abi.DomainProcessing, 99, "new").timerDelete("k", "d").bytes())),
		firings(fs...),
		records(rec("k", new(prog).timerSet("k", "later", 0, 1, "").bytes())), // after the firing: no effect on it
	}}
	eff, err := i.Run(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmtOutputs(eff.Outputs),
		`{fired ""="k/u" ts=1234}{fired ""="k2/t" ts=1234}{fired ""="k/later" ts=1234}`; got != want {
		t.Errorf("outputs\n got %s\nwant %s", got, want)
	}
	if len(eff.Timers) != 3 {
		t.Errorf("timers %s", fmtTimers(eff.Timers))
	}
	// Run leaves the caller's unit alone: it may be run again (a unit is retried as a whole).
	if !reflect.DeepEqual(fs, orig) || len(u.Steps[1].Firings) != len(orig) || !reflect.DeepEqual(u.Steps[1].Firings, orig) {
		t.Errorf("Run changed the caller's firings:\n got %q\nwant %q", names(u.Steps[1].Firings), names(orig))
	}
	again, err := i.Run(ctx, u, nil)
	if err != nil || fmtOutputs(again.Outputs) != fmtOutputs(eff.Outputs) {
		t.Errorf("the same unit again: %v %s", err, fmtOutputs(again.Outputs))
	}

	// Every firing stale: the step is skipped and the unit succeeds.
	u = &Unit{Steps: []Step{
		records(rec("k", new(prog).timerSet("k", "t", 0, 0, "").bytes())),
		firings(firing("k", "t", out("stale"))),
	}}
	if eff, err = i.Run(ctx, u, nil); err != nil || len(eff.Outputs) != 0 || len(eff.Timers) != 1 {
		t.Errorf("all stale: %v, outputs %s, timers %s", err, fmtOutputs(eff.Outputs), fmtTimers(eff.Timers))
	}

	// A firing step may re-arm its own timer; its firing was delivered.
	u = &Unit{Steps: []Step{firings(firing("k", "t", out("ran").timerSet("k", "t", 0, 50, "")))}}
	if eff, err = i.Run(ctx, u, nil); err != nil || len(eff.Outputs) != 1 || len(eff.Timers) != 1 {
		t.Errorf("re-arm: %v, outputs %s, timers %s", err, fmtOutputs(eff.Outputs), fmtTimers(eff.Timers))
	}
}

func names(fs []abi.Firing) []string {
	var out []string
	for _, f := range fs {
		out = append(out, string(f.Key)+"/"+string(f.Name))
	}
	return out
}

func TestRunFiringsPayload(t *testing.T) {
	// The guest receives a Firings layout it can walk: flags, partition, time, key, name and
	// payload of each firing, in order.
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver02", Limits{}), InstanceConfig{})
	var fs []abi.Firing
	var want strings.Builder
	for n := 0; n < 20; n++ {
		key := strings.Repeat("k", n%3)
		v := fmt.Sprintf("firing %d", n)
		f := firing(key, fmt.Sprint(n), new(prog).emit("o", "", v, nil, int64(n)))
		f.Flags, f.Time = uint32(n%2), int64(n)*1000
		fs = append(fs, f)
		fmt.Fprintf(&want, "{o %q=%q ts=%d}", "", v, n)
	}
	eff, err := i.Run(ctx, &Unit{Steps: []Step{firings(fs...)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmtOutputs(eff.Outputs); got != want.String() {
		t.Errorf("outputs\n got %s\nwant %s", got, want.String())
	}
}

func TestRunMigrate(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver02", Limits{}), InstanceConfig{})
	u := &Unit{Steps: []Step{
		{Kind: StepMigrate, Migrate: abi.Migrate{From: 1, To: 2, Partition: 7, Key: []byte("key")}},
		records(rec("key", new(prog).get("key", "v", scratch, 8).emitLast("v", scratch).bytes())),
	}}
	eff, err := i.Run(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{migrated "key"=%q ts=1234}{v ""=%q ts=1234}`, le32(1, 2, 7), le32(2))
	if got := fmtOutputs(eff.Outputs); got != want {
		t.Errorf("outputs\n got %s\nwant %s", got, want)
	}
	if got, want := fmtWrites(eff.Writes), fmt.Sprintf(`{key/v=%q}`, le32(2)); got != want {
		t.Errorf("writes %s, want %s", got, want)
	}

	// A downgrade the guest refuses fails the unit.
	u.Steps[0].Migrate = abi.Migrate{From: 3, To: 2, Key: []byte("key")}
	eff, err = i.Run(ctx, u, nil)
	ce := asCallError(t, err)
	if ce.Func != abi.ExportMigrate || ce.Code != 1 || ce.GuestMessage != "cannot downgrade" {
		t.Errorf("error %+v", ce)
	}
	if !reflect.DeepEqual(eff, Effects{}) {
		t.Errorf("effects %+v", eff)
	}
}

func TestRunTickPayload(t *testing.T) {
	// The tick's source reaches the guest intact (driver02 runs it): a long one too.
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver02", Limits{}), InstanceConfig{})
	big := strings.Repeat("b", 100_000)
	u := tick(new(prog).emit("o", "k", big, nil, -1))
	u.Steps[0].Tick.Now = 1 << 50
	eff, err := i.Run(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Outputs) != 1 || string(eff.Outputs[0].Value) != big {
		t.Errorf("outputs %d", len(eff.Outputs))
	}
}

func TestStateVersionAndExports(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	d := compile(t, r, "driver02", Limits{})
	if v := d.Info().ABIVersion; v != 2 {
		t.Errorf("driver02 ABI version %#x", v)
	}
	all := []StepKind{StepRecords, StepFirings, StepTick, StepMigrate}
	for _, tc := range []struct {
		config  []byte
		version uint32
	}{
		{nil, 2},
		{new(prog).setVersion(7).bytes(), 7},
		{new(prog).setVersion(0).bytes(), 0},
	} {
		i := instantiate(t, d, InstanceConfig{Config: tc.config})
		if got := i.StateVersion(); got != tc.version {
			t.Errorf("StateVersion = %d, want %d (asked after init)", got, tc.version)
		}
		for _, k := range all {
			if !i.HasExport(k) {
				t.Errorf("driver02: HasExport(%d) = false", k)
			}
		}
		for _, k := range []StepKind{0, StepMigrate + 1, 255} {
			if i.HasExport(k) {
				t.Errorf("HasExport(%d) = true", k)
			}
		}
	}

	// A 0.2 guest without the optional exports, and a 0.1 guest whose 0.2 exports are ignored
	// (each would trap if called; its wasmstream_state_version would say 9).
	for _, name := range []string{"plain02", "exports01"} {
		t.Run(name, func(t *testing.T) {
			i := instantiate(t, compile(t, r, name, Limits{}), InstanceConfig{})
			if got := i.StateVersion(); got != 0 {
				t.Errorf("StateVersion = %d, want 0", got)
			}
			if !i.HasExport(StepRecords) {
				t.Error("HasExport(StepRecords) = false")
			}
			for _, k := range all[1:] {
				if i.HasExport(k) {
					t.Errorf("HasExport(%d) = true", k)
				}
				// Refused before any guest call, even a records step that comes first.
				rs := observe(i)
				u := &Unit{Steps: []Step{records(rec("k", nil)), {Kind: k,
					Firings: []abi.Firing{firing("k", "t", nil)}, Migrate: abi.Migrate{Key: []byte("k")}}}}
				eff, err := i.Run(ctx, u, nil)
				if !errors.Is(err, ErrNoExport) || !reflect.DeepEqual(eff, Effects{}) {
					t.Errorf("Run with step %d: %v %+v, want ErrNoExport", k, err, eff)
				} else if want := fmt.Sprintf("step 1 (kind %d)", k); !strings.HasSuffix(err.Error(), want) {
					t.Errorf("error %q does not end with %q", err, want)
				}
				if len(*rs) != 0 || i.Broken() {
					t.Errorf("step %d: the guest was called: %v, broken %v", k, *rs, i.Broken())
				}
			}
			if _, err := i.Process(ctx, []abi.Record{rec("k", nil)}, nil); err != nil {
				t.Errorf("Process after ErrNoExport: %v", err)
			}
		})
	}
}

func TestNewerImportRefused(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	_, err := r.Compile(ctx, fixture(t, "timer01"), Limits{})
	var me *ModuleError
	if !errors.As(err, &me) {
		t.Fatalf("error %v (%T), want a *ModuleError", err, err)
	}
	want := []string{"imports wasmstream_v0.timer_set, added in ABI 0.2, but declares ABI 0.1"}
	if !slices.Equal(me.Problems, want) {
		t.Errorf("problems %q, want %q", me.Problems, want)
	}
}

func TestRunRefuses(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "driver02", Limits{})

	// A trap in any step breaks the instance.
	i := instantiate(t, m, InstanceConfig{})
	_, err := i.Run(ctx, tick(new(prog).op(opTrap)), nil)
	if ce := asCallError(t, err); !ce.Trap || ce.Func != abi.ExportOnTick || !i.Broken() {
		t.Errorf("trap: %+v, broken %v", ce, i.Broken())
	}
	if _, err := i.Run(ctx, tick(new(prog)), nil); !errors.Is(err, ErrBroken) {
		t.Errorf("Run when broken: %v", err)
	}

	i = instantiate(t, m, InstanceConfig{})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := i.Run(cctx, tick(new(prog)), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context: %v", err)
	}
	if err := i.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := i.Run(ctx, tick(new(prog)), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Run when closed: %v", err)
	}

	// An empty unit calls nothing and has no effects.
	i = instantiate(t, m, InstanceConfig{})
	rs := observe(i)
	if eff, err := i.Run(ctx, &Unit{}, nil); err != nil || !reflect.DeepEqual(eff, Effects{}) || len(*rs) != 0 {
		t.Errorf("empty unit: %v %+v %v", err, eff, *rs)
	}
}
