package modrt

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmstream/wasmstream/host/internal/fuel"
)

// FuzzFuelSound checks that fuel metering is sound (DESIGN S21): a metered program never executes
// more instructions than its budget allows. The fuzzer's bytes drive a generator of valid
// programs — nested blocks, ifs, loops, br / br_if / br_table, calls, returns, and loops in the
// shape standard Go compiles functions to (a dispatch through br_table, every jump
// `i32.const k; local.set $pc; br $loop`), which package fuel meters differently. The
// generator emits each program twice: as is, and with an independent instruction count — two
// counter globals bumped before every straight run of instructions, by how many instructions
// the run holds (block, loop, else and end excepted, as package fuel counts them). Then:
//
//   - total: the fuel the metered program spends on a whole run is at least the instructions
//     the counted copy executed, and with one unit less than that count the run is stopped by
//     fuel exhaustion;
//   - at every point: the counted copy, metered itself, is stopped at a range of budgets below
//     its full cost, and when it is stopped its counters (which run at most one straight run
//     ahead of the instructions executed) show no more instructions than the budget plus that
//     run; when it is not stopped, the budget covered everything it executed.
//
// `go test` runs the seeds below; `go test -fuzz FuzzFuelSound ./host/internal/modrt` explores.
func FuzzFuelSound(f *testing.F) {
	rng := rand.New(rand.NewPCG(21, 22))
	for range 40 {
		b := make([]byte, 64+rng.IntN(400))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		plain, counted, maxRun := genFuelProgram(data)
		checkFuelSound(t, plain, counted, maxRun)
	})
}

func checkFuelSound(t *testing.T, plain, counted []byte, maxRun int64) {
	t.Helper()
	// The instructions the program executes, counted independently of package fuel.
	r := soundRun(t, counted, -1)
	if r.trapped {
		t.Fatalf("the unmetered program trapped: %v", r.err)
	}
	executed := r.count

	// Total: fuel spent on the whole run ≥ instructions executed; one unit less stops it.
	const big = int64(1) << 50
	m := soundRun(t, plain, big)
	if m.trapped {
		t.Fatalf("the metered program trapped with a budget of %d: %v", big, m.err)
	}
	if spent := big - m.fuel; spent < executed {
		t.Fatalf("the metered program spent %d fuel for %d instructions executed", spent, executed)
	}
	if executed > 0 {
		m = soundRun(t, plain, executed-1)
		if !m.trapped || m.fuel >= 0 {
			t.Fatalf("with a budget of %d for %d instructions: trapped %v, counter %d; want the fuel trap", executed-1, executed, m.trapped, m.fuel)
		}
	}

	// At every point: the counted copy, itself metered, executes count + 8·bumps instructions
	// (each bump is 8). Stopped at budget b, it executed at most b of them.
	full := soundRun(t, counted, big)
	if full.trapped {
		t.Fatalf("the metered counted program trapped with a budget of %d: %v", big, full.err)
	}
	total := full.count + 8*full.bumps
	budgets := []int64{0, 1, total / 7, total / 3, total / 2, total - 1}
	for k := int64(1); k < total && len(budgets) < 24; k *= 3 {
		budgets = append(budgets, k)
	}
	for _, b := range budgets {
		if b < 0 || b >= total {
			continue
		}
		s := soundRun(t, counted, b)
		ran := s.count + 8*s.bumps
		if !s.trapped {
			if ran > b {
				t.Fatalf("budget %d: the run completed after %d instructions", b, ran)
			}
			continue
		}
		if s.fuel >= 0 {
			t.Fatalf("budget %d: trapped with the counter at %d (not exhausted): %v", b, s.fuel, s.err)
		}
		if ran > b+maxRun {
			t.Fatalf("budget %d: stopped only after %d instructions (counters run at most %d ahead)", b, ran, maxRun)
		}
	}
}

type soundResult struct {
	trapped            bool
	err                error
	fuel, count, bumps int64
}

var soundRT = sync.OnceValue(func() wazero.Runtime {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	// The slice import, as modrt serves it but with tiny slices, so that every program crosses
	// many slice boundaries: slicing must change neither what a run spends nor where it stops.
	_, err := rt.NewHostModuleBuilder(fuel.SliceModule).NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, s []uint64) {
			m := ctx.Value(soundMeterKey{}).(*fuel.Meter)
			s[0] = uint64(m.Refill(int64(s[0])))
		}), []api.ValueType{api.ValueTypeI64}, []api.ValueType{api.ValueTypeI64}).
		Export(fuel.SliceFunc).Instantiate(ctx)
	if err != nil {
		panic(err)
	}
	return rt
})

type soundMeterKey struct{}

// soundSlice is the slice the sound tests meter with.
const soundSlice = 13

// soundRun runs wasm's "run" export once in a fresh instance. With budget ≥ 0 the module is
// metered first and its counter set to budget; fuel is the counter afterwards.
func soundRun(t *testing.T, wasm []byte, budget int64) soundResult {
	t.Helper()
	ctx := context.Background()
	if budget >= 0 {
		res, err := fuel.Instrument(wasm, fuel.Options{Stack: DefaultMaxCallDepth})
		if err != nil {
			t.Fatalf("Instrument refused a generated program: %v", err)
		}
		wasm = res.Wasm
	}
	rt := soundRT()
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatalf("a generated program does not compile (generator bug): %v", err)
	}
	defer cm.Close(ctx)
	mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close(ctx)
	meter := &fuel.Meter{Slice: soundSlice}
	if budget >= 0 {
		mod.ExportedGlobal(fuel.GlobalExport).(api.MutableGlobal).Set(uint64(meter.Start(budget)))
	}
	_, err = mod.ExportedFunction("run").Call(context.WithValue(ctx, soundMeterKey{}, meter))
	r := soundResult{trapped: err != nil, err: err,
		count: int64(mod.ExportedGlobal("count").Get()), bumps: int64(mod.ExportedGlobal("bumps").Get())}
	if budget >= 0 {
		r.fuel = meter.Left(int64(mod.ExportedGlobal(fuel.GlobalExport).Get()))
	}
	return r
}

// ---- the program generator ----

const (
	wBlock, wLoop, wIf, wElse, wEnd             = 0x02, 0x03, 0x04, 0x05, 0x0b
	wBr, wBrIf, wBrTable, wReturn, wCall        = 0x0c, 0x0d, 0x0e, 0x0f, 0x10
	wDrop, wLocalGet, wLocalSet                 = 0x1a, 0x20, 0x21
	wGlobalGet, wGlobalSet                      = 0x23, 0x24
	wI32Const, wI64Const                        = 0x41, 0x42
	wI32Eqz, wI32Add, wI32Sub, wI64Add          = 0x45, 0x6a, 0x6b, 0x7c
	wEmpty                                      = 0x40
	gCount, gBumps, gSteps               uint32 = 0, 1, 2 // the globals
	lPC                                  uint32 = 0       // the one local: a dispatch loop's $pc
)

// progGen generates one function body twice at once: plain, and counted.
type progGen struct {
	src    []byte
	pos    int
	plain  []byte
	count  []byte
	labels []byte // enclosing labels, innermost last: 'b' (block or if: branch forward), 'l' (loop)
	fn     int    // the function being generated; it may call those below it
	calls  int    // calls left in this function (few: calls multiply the work)
	left   int    // statements left in this function
	maxRun int64
}

func (g *progGen) rnd(n int) int {
	if g.pos >= len(g.src) || n <= 1 {
		return 0
	}
	b := g.src[g.pos]
	g.pos++
	return int(b) % n
}

// run emits instructions that execute as one straight run of n counted instructions: the
// counted copy first bumps its counters.
func (g *progGen) run(n int64, code ...byte) {
	if n > 0 {
		c := []byte{wGlobalGet}
		c = binary.AppendUvarint(c, uint64(gCount))
		c = append(c, wI64Const)
		c = appendSLEB(c, n)
		c = append(c, wI64Add, wGlobalSet)
		c = binary.AppendUvarint(c, uint64(gCount))
		c = append(c, wGlobalGet)
		c = binary.AppendUvarint(c, uint64(gBumps))
		c = append(c, wI64Const, 1, wI64Add, wGlobalSet)
		c = binary.AppendUvarint(c, uint64(gBumps))
		g.count = append(g.count, c...)
		g.maxRun = max(g.maxRun, n)
	}
	g.plain = append(g.plain, code...)
	g.count = append(g.count, code...)
}

// free emits instructions package fuel does not count (block, loop, else, end).
func (g *progGen) free(code ...byte) { g.run(0, code...) }

func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func uleb(v int) []byte { return binary.AppendUvarint(nil, uint64(v)) }

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// forward returns the depths of the enclosing labels a forward branch may target.
func (g *progGen) forward() []int {
	var ds []int
	for d := 0; d < len(g.labels); d++ {
		if g.labels[len(g.labels)-1-d] == 'b' {
			ds = append(ds, d)
		}
	}
	return ds
}

// step emits the guard of a backward jump: leave through the label at depth exit (relative
// to the current position) when the module's steps are spent, else spend one. Every backward
// jump is guarded, so every program ends.
func (g *progGen) step(exit int) {
	g.run(3, cat([]byte{wGlobalGet}, uleb(int(gSteps)), []byte{wI32Eqz, wBrIf}, uleb(exit))...)
	g.run(4, cat([]byte{wGlobalGet}, uleb(int(gSteps)), []byte{wI32Const, 1, wI32Sub, wGlobalSet}, uleb(int(gSteps)))...)
}

func (g *progGen) stmts(depth int) {
	for n := g.rnd(6); n >= 0 && g.left > 0; n-- {
		g.stmt(depth)
	}
}

func (g *progGen) stmt(depth int) {
	g.left--
	kind := g.rnd(12)
	if depth >= 4 && kind >= 2 {
		kind %= 2
	}
	switch kind {
	case 0:
		g.run(2, wI32Const, byte(g.rnd(64)), wDrop)
	case 1:
		g.run(4, wLocalGet, byte(lPC), wI32Const, 3, wI32Add, wDrop)
	case 2: // block
		g.free(wBlock, wEmpty)
		g.labels = append(g.labels, 'b')
		g.stmts(depth + 1)
		g.labels = g.labels[:len(g.labels)-1]
		g.free(wEnd)
	case 3: // if / else
		g.run(2, wI32Const, byte(g.rnd(2)), wIf, wEmpty)
		g.labels = append(g.labels, 'b')
		g.stmts(depth + 1)
		if g.rnd(2) == 0 {
			g.free(wElse)
			g.stmts(depth + 1)
		}
		g.labels = g.labels[:len(g.labels)-1]
		g.free(wEnd)
	case 4, 5: // br or br_if forward
		ds := g.forward()
		if len(ds) == 0 {
			g.run(2, wI32Const, 1, wDrop)
			return
		}
		d := ds[g.rnd(len(ds))]
		if kind == 4 && g.rnd(3) == 0 {
			g.run(1, cat([]byte{wBr}, uleb(d))...) // what follows is dead code
		} else {
			g.run(2, cat([]byte{wI32Const, byte(g.rnd(2)), wBrIf}, uleb(d))...)
		}
	case 6: // br_table forward
		ds := g.forward()
		if len(ds) == 0 {
			return
		}
		n := 1 + g.rnd(4)
		code := cat([]byte{wI32Const, byte(g.rnd(6)), wBrTable}, uleb(n))
		for range n + 1 { // n targets and the default
			code = append(code, uleb(ds[g.rnd(len(ds))])...)
		}
		g.run(2, code...)
	case 7: // a loop that runs while steps last and its condition holds
		g.free(wBlock, wEmpty, wLoop, wEmpty)
		g.labels = append(g.labels, 'b', 'l')
		g.stmts(depth + 1)
		g.step(1)
		g.run(2, wI32Const, byte(g.rnd(4)), wBrIf, 0)
		g.labels = g.labels[:len(g.labels)-2]
		g.free(wEnd, wEnd)
	case 8:
		if g.fn > 0 && g.calls > 0 {
			g.calls--
			g.run(1, cat([]byte{wCall}, uleb(g.rnd(g.fn)))...)
		}
	case 9:
		if depth > 0 && g.rnd(4) == 0 {
			g.run(1, wReturn)
		}
	default:
		g.dispatch(depth)
	}
}

// dispatch emits a loop in the shape standard Go compiles a function with jumps to:
//
//	block $exit
//	  i32.const 0  local.set $pc
//	  loop $L
//	    block … block (n)  local.get $pc  br_table 0 … n-1
//	    end  segment 1 … end  segment n
//	  end
//	end
//
// A jump to segment k+1 is `i32.const k; local.set $pc; br $L`, after the steps guard.
func (g *progGen) dispatch(depth int) {
	n := 1 + g.rnd(5)
	g.free(wBlock, wEmpty)
	g.labels = append(g.labels, 'b')
	// Every arrival at $L runs local.get and br_table: the 2 are counted with the instructions
	// before the arrival (here, and with each jump).
	g.run(4, wI32Const, 0, wLocalSet, byte(lPC))
	g.free(wLoop, wEmpty)
	g.labels = append(g.labels, 'l')
	for range n {
		g.free(wBlock, wEmpty)
	}
	code := cat([]byte{wLocalGet, byte(lPC), wBrTable}, uleb(n))
	for k := range n {
		code = append(code, uleb(k)...)
	}
	code = append(code, uleb(n-1)...)
	g.plain = append(g.plain, code...) // counted with the arrival
	g.count = append(g.count, code...)
	for range n {
		g.labels = append(g.labels, 'x') // dispatch blocks: not branched to but by the br_table
	}
	for s := 1; s <= n; s++ {
		g.labels = g.labels[:len(g.labels)-1]
		g.free(wEnd)
		// Segment s: some statements, then maybe a jump (backward or forward) or a way out.
		g.stmts(depth + 1)
		loopDepth := 0
		for d := len(g.labels) - 1; g.labels[d] != 'l'; d-- {
			loopDepth++
		}
		switch g.rnd(4) {
		case 0, 1:
			g.step(loopDepth + 1) // out through $exit
			k := g.rnd(n)
			g.run(5, cat([]byte{wI32Const, byte(k), wLocalSet, byte(lPC), wBr}, uleb(loopDepth))...)
		case 2:
			g.run(1, cat([]byte{wBr}, uleb(loopDepth+1))...)
		}
	}
	g.labels = g.labels[:len(g.labels)-2]
	g.free(wEnd, wEnd)
}

// genFuelProgram makes a module from data: functions f0…fn-1 () -> (), fi calling only those
// below it, "run" = fn-1, and the globals count, bumps (i64, exported) and steps (i32, the
// backward jumps left). It returns the plain module, the counted one, and the longest straight
// run a bump covers.
func genFuelProgram(data []byte) (plain, counted []byte, maxRun int64) {
	g := &progGen{src: data}
	nf := 1 + g.rnd(4)
	steps := g.rnd(40)
	var pcode, ccode [][]byte
	for fn := range nf {
		g.fn, g.calls, g.left, g.labels = fn, 2, 12+g.rnd(40), nil
		g.plain, g.count = nil, nil
		g.stmts(0)
		for g.left > 0 && g.pos < len(g.src) {
			g.stmt(0)
		}
		g.free(wEnd)
		locals := []byte{1, 1, 0x7f} // one i32
		pcode = append(pcode, cat(locals, g.plain))
		ccode = append(ccode, cat(locals, g.count))
	}
	module := func(bodies [][]byte) []byte {
		m := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
		section := func(id byte, body []byte) { m = append(append(append(m, id), uleb(len(body))...), body...) }
		section(1, []byte{1, 0x60, 0, 0})
		funcs := uleb(nf)
		for range nf {
			funcs = append(funcs, 0)
		}
		section(3, funcs)
		section(6, cat([]byte{3, 0x7e, 1, wI64Const, 0, wEnd, 0x7e, 1, wI64Const, 0, wEnd, 0x7f, 1, wI32Const},
			appendSLEB(nil, int64(steps)), []byte{wEnd}))
		exp := []byte{3}
		exp = append(append(append(exp, 3), "run"...), 0)
		exp = append(exp, uleb(nf-1)...)
		exp = append(append(append(exp, 5), "count"...), 3, 0)
		exp = append(append(append(exp, 5), "bumps"...), 3, 1)
		section(7, exp)
		code := uleb(nf)
		for _, b := range bodies {
			code = append(append(code, uleb(len(b))...), b...)
		}
		section(10, code)
		return m
	}
	return module(pcode), module(ccode), g.maxRun
}
