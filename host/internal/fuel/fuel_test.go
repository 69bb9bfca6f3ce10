package fuel

import (
	"bytes"
	"errors"
	"testing"
)

// oneFunc assembles a module with one function of type () -> () whose code is code (without the
// final end), exported as "f".
func oneFunc(code ...byte) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = appendSection(b, secType, []byte{1, 0x60, 0, 0})
	b = appendSection(b, secFunction, []byte{1, 0})
	b = appendSection(b, secExport, append(appendName([]byte{1}, "f"), 0, 0))
	fn := append([]byte{0}, code...) // no locals
	fn = append(fn, opEnd)
	body := appendU32([]byte{1}, uint32(len(fn)))
	b = appendSection(b, secCode, append(body, fn...))
	return b
}

// charges returns the charge points the analysis finds in a module made by oneFunc.
func charges(t *testing.T, code ...byte) []point {
	t.Helper()
	var a analysis
	src := append(append([]byte{}, code...), opEnd)
	if err := a.costs(&Reader{b: src}, false); err != nil {
		t.Fatal(err)
	}
	if a.loops > 0 {
		if err := a.costs(&Reader{b: src}, true); err != nil {
			t.Fatal(err)
		}
	}
	return append([]point(nil), a.points...)
}

func TestCosts(t *testing.T) {
	const (
		nop  = 0x01
		drop = 0x1a
	)
	i32 := func(v byte) []byte { return []byte{opI32Const, v} }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name string
		code []byte
		want []int64 // entry, then each charge point in order
	}{
		{"empty function", nil, []int64{1}},
		{"straight line", cat(i32(1), []byte{drop}, i32(2), []byte{drop}), []int64{4}},
		{"structure is free", []byte{opBlock, blockEmpty, nop, opEnd}, []int64{1}},
		// if/else: the longer arm counts.
		{"longest arm", cat(i32(1), []byte{opIf, blockEmpty}, i32(1), []byte{drop, opElse}, i32(1), []byte{drop}, i32(1), []byte{drop, opEnd}),
			[]int64{6}},
		// A loop is paid at its header: the loop body (2), the entry does not see it.
		{"loop", cat([]byte{opLoop, blockEmpty}, i32(1), []byte{opBrIf, 0, opEnd}), []int64{1, 2}},
		// An infinite loop pays at least one unit per iteration.
		{"empty loop", []byte{opLoop, blockEmpty, opBr, 0, opEnd}, []int64{1, 1}},
		// Code after a branch is dead until the block ends.
		{"dead code", cat([]byte{opBlock, blockEmpty, opBr, 0}, i32(1), []byte{drop, opEnd}, i32(1), []byte{drop}), []int64{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int64
			for _, p := range charges(t, tc.code...) {
				got = append(got, p.charge)
			}
			if !equal(got, tc.want) {
				t.Errorf("charges %v, want %v", got, tc.want)
			}
			// And the module rewrites.
			res, err := Instrument(oneFunc(tc.code...), Options{Initial: 7})
			if err != nil {
				t.Fatal(err)
			}
			if res.Functions != 1 || res.Start {
				t.Errorf("result %+v", res)
			}
		})
	}
}

// A Go-style dispatch loop charges backward jumps only.
func TestDispatchLoop(t *testing.T) {
	// loop; block; block; local.get 0; br_table 0 1 1; end (segment 1); i32.const 2;
	// local.set 0; br 1 (forward: to segment 2) ; end (segment 2); i32.const 1; local.set 0;
	// br 0 (backward: entry 0 of the table is segment 1); end
	code := []byte{
		opLoop, blockEmpty, opBlock, blockEmpty, opBlock, blockEmpty,
		opLocalGet, 0, opBrTable, 2, 0, 1, 1,
		opEnd,
		opI32Const, 2, opLocalSet, 0, opBr, 1,
		opEnd,
		opI32Const, 0, opLocalSet, 0, opBr, 0,
		opEnd,
	}
	pts := charges(t, code...)
	var before []int64
	for _, p := range pts {
		if p.kind == chargeBefore && p.charge > 0 {
			before = append(before, p.charge)
		}
	}
	// Entry (whole loop) and one backward jump; the forward jump is free. Segments cost 3
	// each and the dispatch 2; the longest run from segment 1 (jumping forward to segment 2):
	// (2+3) + (2+3), for the entry and the jump back to segment 1.
	if !equal(before, []int64{10, 10}) {
		t.Errorf("charges before instructions %v (points %+v); want [10 10]", before, pts)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestInstrumentAddsGlobalAndExports(t *testing.T) {
	res, err := Instrument(oneFunc(), Options{Initial: 42, Stack: 7})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(res.Wasm, []byte(GlobalExport)) || !bytes.Contains(res.Wasm, []byte(StackExport)) ||
		bytes.Contains(res.Wasm, []byte(StartExport)) {
		t.Error("the counters are not exported, or a start export was added to a module without start")
	}
	// The global section holds one mutable i64 initialised to 42 and one mutable i32 to 7.
	if !bytes.Contains(res.Wasm, []byte{secGlobal, 11, 2, 0x7e, 1, opI64Const, 42, opEnd, 0x7f, 1, opI32Const, 7, opEnd}) {
		t.Errorf("no global section with the counters in %x", res.Wasm)
	}
}

func TestInstrumentRefuses(t *testing.T) {
	for _, tc := range []struct {
		name        string
		wasm        []byte
		unsupported bool
	}{
		{"not wasm", []byte("hello world"), false},
		{"truncated", oneFunc(opI32Const, 1, 0x1a)[:30], false},
		{"unknown opcode", oneFunc(0xff), false},
		{"exception handling", oneFunc(0x06, blockEmpty, opEnd), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Instrument(tc.wasm, Options{})
			var e *Error
			if !errors.As(err, &e) || e.Unsupported != tc.unsupported {
				t.Fatalf("Instrument = %v; want an *Error with Unsupported %v", err, tc.unsupported)
			}
		})
	}
}

// FuzzInstrument: any input is either rewritten or refused with an *Error, never a panic, and a
// rewritten module can be rewritten again (the output is well-formed enough to decode).
// LimitTables and Declarations, which read every module a host is given, never panic either.
func FuzzInstrument(f *testing.F) {
	f.Add(oneFunc())
	f.Add(oneFunc(opLoop, blockEmpty, opBr, 0, opEnd))
	f.Add(oneFunc(opBlock, blockEmpty, opI32Const, 1, opBrIf, 0, opEnd))
	// A table, element segments, a global with ref.func, a name section.
	withTable := oneFunc(opI32Const, 0, opI32Const, 0, opI32Const, 1, 0xfc, 17, 0)
	withTable = appendSection(withTable[:8:8], secType, []byte{1, 0x60, 0, 0})
	withTable = appendSection(withTable, secFunction, []byte{1, 0})
	withTable = appendSection(withTable, secTable, []byte{1, 0x70, 0, 4})
	withTable = appendSection(withTable, secGlobal, []byte{1, 0x70, 0, 0xd2, 0, opEnd})
	withTable = appendSection(withTable, secElement, []byte{2, 0, opI32Const, 0, opEnd, 1, 0, 1, 0, 1, 0})
	withTable = appendSection(withTable, secCode, []byte{1, 2, 0, opEnd})
	withTable = appendSection(withTable, secCustom, append(appendName(nil, "name"), 1, 4, 1, 0, 1, 'f'))
	f.Add(withTable)
	f.Fuzz(func(t *testing.T, wasm []byte) {
		if _, err := LimitTables(wasm, 10); err != nil {
			var e *Error
			var tm *TableMinimumError
			if !errors.As(err, &e) && !errors.As(err, &tm) {
				t.Fatalf("LimitTables error %v is neither an *Error nor a *TableMinimumError", err)
			}
		}
		if _, err := Declarations(wasm); err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Declarations error %v is not an *Error", err)
			}
		}
		res, err := Instrument(wasm, Options{Initial: 1})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		// The counter's name is now reserved, so a second pass must refuse it.
		if _, err := Instrument(res.Wasm, Options{}); err == nil {
			t.Fatal("a metered module was metered twice")
		}
	})
}

// A call of an imported (host) function costs HostCallUnits; a call of a defined one a unit.
func TestHostCallCost(t *testing.T) {
	// call 0 (an import); drop; call 1 (defined); drop
	code := []byte{opCall, 0, 0x1a, opCall, 1, 0x1a, opEnd}
	a := analysis{imports: 1}
	if err := a.costs(&Reader{b: code}, false); err != nil {
		t.Fatal(err)
	}
	if got, want := a.points[0].charge, int64(HostCallUnits+3); got != want {
		t.Errorf("charge %d; want %d (HostCallUnits for the import's call, 1 for each other instruction)", got, want)
	}
}
