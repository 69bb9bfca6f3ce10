package fuel

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Names of the exports Instrument adds. They contain a dot, which no ABI export has; a module
// that already exports either name is refused.
const (
	// GlobalExport is the fuel counter, a mutable i64 global.
	GlobalExport = "wasmstream.fuel"
	// StartExport is the module's start function, when it has one: () -> ().
	StartExport = "wasmstream.start"
	// SliceModule and SliceFunc name the function Instrument imports, (i64) -> i64: the
	// module calls it when a charge drives the counter negative, with the counter's value, and
	// continues with the counter it returns, or traps if that is negative too (see Meter).
	SliceModule = "wasmstream.fuel"
	SliceFunc   = "slice"
	// StackExport is the call-stack counter, a mutable i32 global: the stack units the guest may
	// still use (see Options.Stack). Every defined function subtracts its frame's units at its
	// entry and traps when the counter goes negative; a caller restores the counter after each
	// call returns.
	StackExport = "wasmstream.stack"
)

// Options configure Instrument.
type Options struct {
	// Initial is the counter's value when an instance is created. With the start section moved
	// to StartExport nothing runs before the host sets the counter, so this only matters to a
	// host that runs the module without setting it.
	Initial int64
	// Stack is the stack counter's value when an instance is created (StackExport): the units of
	// call stack a call may use, FrameUnits per function frame. The host sets it before each
	// call into the guest.
	Stack int32
}

// FrameUnits returns the stack units a frame of a function with n params and locals costs:
// 1 + n/LocalsPerUnit. The runtime's frame holds the locals (8 bytes each at most, 16 for a
// v128) besides a fixed part and the spilled operands, so that the units bound the stack's
// bytes within a factor for every shape of function.
func FrameUnits(n uint64) int32 {
	return int32(1 + min(n/LocalsPerUnit, 1<<30))
}

// HostCallUnits is what a call of an imported function (a host function: the ABI's or WASI's)
// costs, instead of the one unit of other instructions: a host call takes 150-400 ns where an
// instruction of a plain loop takes about 1, and a loop of cheap host calls (now_ms,
// clock_time_get, poll_oneoff with the fake clock, a state_get of a missing name) at one unit a
// call ran 30-140 times as long as a plain loop under the same budget (9.7 s a record for
// now_ms at the default fuel_per_record). The bytes a host function copies are charged besides
// (by the host, at run time).
const HostCallUnits = 256

// LocalsPerUnit is how many params and locals of a function add one unit to its frame's cost
// (FrameUnits).
const LocalsPerUnit = 16

// Result is a metered module.
type Result struct {
	// Wasm is the rewritten binary.
	Wasm []byte
	// Start is true when the module had a start function, now exported as StartExport: the
	// host must call it once, before any other export, as instantiation would have.
	Start bool
	// Functions counts the functions metered, Loops their loops, and Points the charges inserted
	// besides function entries (loop headers, br_table targets, backward jumps of dispatch loops).
	Functions, Loops, Points int
	// Sized counts the bulk memory and table instructions charged by their size operand.
	Sized int
}

// Error is returned by Instrument when a module cannot be metered: it is malformed, or uses an
// instruction the rewriter does not know.
type Error struct {
	// Offset is the byte offset in the original binary where the problem was found.
	Offset int
	// Func is the index of the function whose body is at fault, or -1.
	Func int
	// Reason says what is wrong, e.g. "unsupported opcode 0x06 (exception handling)".
	Reason string
	// Unsupported is true when the module may be valid WebAssembly but cannot be metered: it
	// uses exception handling or typed function references, or exports a reserved name.
	// Otherwise the binary is malformed.
	Unsupported bool
}

func (e *Error) Error() string { return "fuel: " + e.Detail() }

// Detail is the error without the package prefix: where, then what.
func (e *Error) Detail() string {
	if e.Func >= 0 {
		return fmt.Sprintf("function %d at offset 0x%x: %s", e.Func, e.Offset, e.Reason)
	}
	if e.Offset > 0 {
		return fmt.Sprintf("at offset 0x%x: %s", e.Offset, e.Reason)
	}
	return e.Reason
}

// errUnsupported marks a valid construct the rewriter cannot meter.
type errUnsupported struct{ msg string }

func (e errUnsupported) Error() string { return e.msg }

// Section ids.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// rank is the order in which non-custom sections must appear.
func rank(id byte) int {
	switch id {
	case secType:
		return 1
	case secImport:
		return 2
	case secFunction:
		return 3
	case secTable:
		return 4
	case secMemory:
		return 5
	case secTag:
		return 6
	case secGlobal:
		return 7
	case secExport:
		return 8
	case secStart:
		return 9
	case secElement:
		return 10
	case secDataCount:
		return 11
	case secCode:
		return 12
	case secData:
		return 13
	}
	return 100
}

type section struct {
	id   byte
	hdr  int // offset of the section's id in the binary
	off  int // offset of the body in the binary
	body []byte
}

// module is what Instrument needs to know about the input.
type module struct {
	sections      []section
	typeParams    []int // number of params of each type (len: the number of types)
	funcTypes     []uint32
	importedFuncs int
	globals       int // imported and defined
	exportNames   []string
	start         int64 // -1 when none
}

// Instrument returns a copy of wasm that meters its own execution (see the package
// documentation). wasm is not modified. An *Error says why a module cannot be metered;
// Instrument does not fully validate the module — the runtime does, after rewriting.
func Instrument(wasm []byte, opt Options) (Result, error) {
	m, err := parse(wasm)
	if err != nil {
		return Result{}, err
	}
	if err := m.checkReserved(); err != nil {
		return Result{}, err
	}
	w := &writer{m: m, opt: opt, gidx: uint32(m.globals), res: Result{Start: m.start >= 0}}
	w.out = make([]byte, 0, len(wasm)+len(wasm)/8+64)
	w.out = append(w.out, wasm[:8]...)
	for _, s := range m.sections {
		if s.id == secCustom {
			w.custom(s)
			continue
		}
		if err := w.addMissing(rank(s.id)); err != nil {
			return Result{}, err
		}
		if err := w.section(s); err != nil {
			return Result{}, wrapErr(err, s.off, -1)
		}
	}
	if err := w.addMissing(math.MaxInt); err != nil {
		return Result{}, err
	}
	w.res.Wasm = w.out
	return w.res, nil
}

// checkReserved refuses a module that exports one of the names Instrument adds.
func (m *module) checkReserved() error {
	for _, n := range m.exportNames {
		if n == GlobalExport || n == StartExport || n == StackExport {
			return &Error{Func: -1, Unsupported: true,
				Reason: fmt.Sprintf("the module exports %q, a name reserved for fuel metering", n)}
		}
	}
	return nil
}

// writer writes the sections of the metered module.
type writer struct {
	m    *module
	opt  Options
	gidx uint32 // the fuel counter's global index; the stack counter's is gidx+1
	out  []byte
	res  Result
	// extended[i]: the section additions[i] has been written.
	extended [len(additions)]bool
}

// additions are the sections Instrument adds entries to, in section order: each is rewritten
// where the module has it, or added where it would be (extend).
var additions = [...]byte{secType, secImport, secGlobal, secExport}

// addMissing writes the additions that come before the section of rank before and are not
// written yet, as sections of their own.
func (w *writer) addMissing(before int) error {
	for i, id := range additions {
		if !w.extended[i] && before > rank(id) {
			if err := w.extend(id, nil, 0); err != nil {
				return err
			}
			w.extended[i] = true
		}
	}
	return nil
}

// section writes the module's section s as the metered module has it.
func (w *writer) section(s section) error {
	switch s.id {
	case secType, secImport, secGlobal, secExport:
		for i, id := range additions {
			if id == s.id {
				w.extended[i] = true
				return w.extend(s.id, s.body, s.off)
			}
		}
	case secStart:
		// Moved to StartExport.
	case secElement:
		body, err := w.m.remapElements(s.body, s.off)
		if err != nil {
			return err
		}
		w.out = appendSection(w.out, secElement, body)
	case secCode:
		body, err := instrumentCode(w.m, s, w.gidx, &w.res)
		if err != nil {
			return err
		}
		w.out = appendSection(w.out, secCode, body)
	default:
		w.out = appendSection(w.out, s.id, s.body)
	}
	return nil
}

// custom writes a custom section: DWARF sections are dropped, the "name" section remapped (or
// dropped when it cannot be), any other copied.
func (w *writer) custom(s section) {
	nr := &Reader{b: s.body}
	name, _ := nr.Name()
	switch {
	case strings.HasPrefix(name, ".debug_"):
	case name == "name":
		if names, ok := w.m.remapNames(nr.b); ok {
			w.out = appendSection(w.out, secCustom, append(appendName(nil, name), names...))
		}
	default:
		w.out = appendSection(w.out, s.id, s.body)
	}
}

// extend writes the section id, one of additions, with what Instrument adds to it: old is the
// module's own section at offset off, or nil when it has none. The slice function's type,
// (i64) -> i64, goes after the module's types; its import after the module's imports; the
// counters after the module's globals; their exports, and the start function's, after the
// module's exports.
func (w *writer) extend(id byte, old []byte, off int) error {
	m := w.m
	switch id {
	case secType:
		return w.vec(secType, old, off, 1, nil, []byte{0x60, 1, 0x7e, 1, 0x7e})
	case secImport:
		imp := appendName(appendName(nil, SliceModule), SliceFunc)
		imp = append(append(imp, KindFunc), appendU32(nil, uint32(len(m.typeParams)))...)
		return w.vec(secImport, old, off, 1, nil, imp)
	case secGlobal:
		g := []byte{0x7e, 0x01, 0x42} // i64, mutable, i64.const
		g = appendS64(g, w.opt.Initial)
		g = append(g, 0x0b)
		g = append(g, 0x7f, 0x01, opI32Const) // the stack counter: i32, mutable, i32.const
		g = appendS64(g, int64(w.opt.Stack))
		g = append(g, 0x0b)
		return w.vec(secGlobal, old, off, 2, m.remapGlobals, g)
	case secExport:
		extra := uint32(2)
		if m.start >= 0 {
			extra = 3
		}
		ex := appendName(nil, GlobalExport)
		ex = append(ex, 0x03)
		ex = appendU32(ex, w.gidx)
		ex = appendName(ex, StackExport)
		ex = append(ex, 0x03)
		ex = appendU32(ex, w.gidx+1)
		if m.start >= 0 {
			ex = appendName(ex, StartExport)
			ex = append(ex, 0x00)
			ex = appendU32(ex, m.fn(uint32(m.start)))
		}
		return w.vec(secExport, old, off, extra, m.remapExports, ex)
	}
	return fmt.Errorf("section %d is not one Instrument adds to", id)
}

// vec writes a section that is a vector: its count plus extra, its entries (each rewritten by
// entries, or copied when nil), then more.
func (w *writer) vec(id byte, old []byte, off int, extra uint32, entries func(r *Reader, n uint32, out []byte) ([]byte, error), more []byte) error {
	var body []byte
	if old == nil {
		body = appendU32(body, extra)
	} else {
		r := &Reader{b: old, base: off}
		n, err := r.U32()
		if err != nil {
			return err
		}
		body = appendU32(make([]byte, 0, len(old)+len(more)+8), n+extra)
		if entries == nil {
			body = append(body, r.b...)
		} else if body, err = entries(r, n, body); err != nil {
			return err
		} else if len(r.b) != 0 {
			return fmt.Errorf("section %d has %d bytes after its entries", id, len(r.b))
		}
	}
	w.out = appendSection(w.out, id, append(body, more...))
	return nil
}

func wrapErr(err error, off, fn int) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var u errUnsupported
	return &Error{Offset: off, Func: fn, Reason: err.Error(), Unsupported: errors.As(err, &u)}
}

// parse splits the binary into sections and reads the indices Instrument needs.
func parse(wasm []byte) (*module, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" || wasm[4] != 1 || wasm[5] != 0 || wasm[6] != 0 || wasm[7] != 0 {
		return nil, &Error{Func: -1, Reason: "not a WebAssembly 1.0 binary"}
	}
	m := &module{start: -1}
	r := &Reader{b: wasm[8:], base: 8}
	last := 0
	for len(r.b) > 0 {
		hdr := r.Offset()
		id, _ := r.Byte()
		size, err := r.U32()
		if err != nil {
			return nil, wrapErr(err, r.Offset(), -1)
		}
		off := r.Offset()
		body, err := r.Take(int(size))
		if err != nil {
			return nil, &Error{Offset: off, Func: -1, Reason: fmt.Sprintf("section %d runs past the end of the binary", id)}
		}
		if id != secCustom {
			if rk := rank(id); rk == 100 {
				return nil, &Error{Offset: off, Func: -1, Reason: fmt.Sprintf("unknown section id %d", id)}
			} else if rk <= last {
				return nil, &Error{Offset: off, Func: -1, Reason: fmt.Sprintf("section %d out of order", id)}
			} else {
				last = rk
			}
		}
		m.sections = append(m.sections, section{id: id, hdr: hdr, off: off, body: body})
		sr := &Reader{b: body, base: off}
		switch id {
		case secType:
			err = m.parseTypes(sr)
		case secImport:
			err = m.parseImports(sr)
		case secFunction:
			err = m.parseFunctions(sr)
		case secGlobal:
			var n uint32
			n, err = sr.U32()
			m.globals += int(n)
		case secExport:
			err = m.parseExports(sr)
		case secStart:
			var f uint32
			f, err = sr.U32()
			m.start = int64(f)
		}
		if err == nil && id != secCustom && id != secGlobal && id != secCode && id < secData && id != secTable &&
			id != secMemory && id != secElement && len(sr.b) != 0 {
			err = fmt.Errorf("section %d has %d bytes after its entries", id, len(sr.b))
		}
		if err != nil {
			return nil, wrapErr(err, sr.Offset(), -1)
		}
	}
	return m, nil
}

func (m *module) parseTypes(r *Reader) error {
	return r.Vec(func() error {
		params, _, err := r.FuncType()
		if err != nil {
			return err
		}
		m.typeParams = append(m.typeParams, len(params))
		return nil
	})
}

func (m *module) parseImports(r *Reader) error {
	return r.Vec(func() error {
		im, err := r.Import()
		if err != nil {
			return err
		}
		switch im.Kind {
		case KindFunc:
			m.funcTypes = append(m.funcTypes, im.Type)
			m.importedFuncs++
		case KindGlobal:
			m.globals++
		}
		return nil
	})
}

func (m *module) parseFunctions(r *Reader) (err error) {
	m.funcTypes, err = r.Indices(m.funcTypes)
	return err
}

func (m *module) parseExports(r *Reader) error {
	return r.Vec(func() error {
		ex, err := r.Export()
		if err != nil {
			return err
		}
		m.exportNames = append(m.exportNames, ex.Name)
		return nil
	})
}

// ---- binary writing (reading is Reader, in reader.go) ----

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}

func appendSection(b []byte, id byte, body []byte) []byte {
	b = append(b, id)
	b = appendU32(b, uint32(len(body)))
	return append(b, body...)
}
