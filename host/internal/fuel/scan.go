package fuel

// Declared is what a module declares that costs the runtime memory or time to compile, whatever
// its code does when it runs: the host refuses modules over its limits before compiling them
// (the runtime's compile time grows with the square of the nesting depth, and each declared
// local costs memory in every compiled function).
type Declared struct {
	// Functions counts the functions the module defines (not imports).
	Functions int
	// Locals counts the local variables all defined functions declare together (parameters
	// excepted); MaxFuncLocals is the most one function declares.
	Locals, MaxFuncLocals uint64
	// MaxDepth is the deepest nesting of blocks, loops and ifs in any function body;
	// MaxLoopDepth the deepest nesting of loops alone.
	MaxDepth, MaxLoopDepth int
	// MaxBlocks is the most blocks any function has: every block, loop, if, else, br, br_if and
	// return counts one (each starts a basic block of the compiled code), and a br_table one
	// plus one per 8 of its entries (each entry a small block). BlockWork is the sum over the
	// functions of the square of their blocks: the runtime's compiler takes time in proportion
	// to it (10-50 ns a unit: one function of 20,000 blocks of a br_if each, 40,000 blocks and
	// 136 KB, took 14 s to compile, of 50,000 br_if 118 s), however few instructions they hold.
	MaxBlocks int
	BlockWork uint64
	// MaxFuncBytes is the size of the largest function body (its locals and code). The
	// compiler's time and memory grow faster than a function's size: a function of 2·10^7
	// instructions, 58 MB, took 66 s and 3.6 GB, the same instructions in 100 functions a
	// fifth of the time; a Go guest's largest is about 30 KB.
	MaxFuncBytes int
	// DepthSum is the sum over every instruction of the structures it is nested in: the work of
	// the runtime's compiler grows with it (about 10 ns a unit: 10,000 nested blocks, 10^8, take
	// about 1.5 s to compile), not with the module's size.
	DepthSum uint64
	// ElemEntries counts the elements of all the element segments: the runtime holds each
	// segment's references in every instance (a passive one until it is dropped), and it took
	// 16 s and 1.2 GB to compile a 10 MB module of one segment of 10^7 elements, and 4.8 s to
	// instantiate it.
	ElemEntries uint64
}

// Declarations reads what wasm declares (see Declared) in one pass over its code. An *Error says
// why the module cannot be read.
func Declarations(wasm []byte) (Declared, error) {
	var d Declared
	m, err := parse(wasm)
	if err != nil {
		return d, err
	}
	d.Functions = len(m.funcTypes) - m.importedFuncs
	for _, s := range m.sections {
		if s.id == secElement {
			if err := d.scanElements(m, s); err != nil {
				return d, err
			}
		}
		if s.id == secCode {
			if err := d.scanCode(m, s); err != nil {
				return d, err
			}
		}
	}
	return d, nil
}

// scanElements adds the elements of the segments of the element section s.
func (d *Declared) scanElements(m *module, s section) error {
	r := &Reader{b: s.body, base: s.off}
	n, err := r.U32()
	if err != nil {
		return wrapErr(err, r.Offset(), -1)
	}
	var scratch []byte
	for k := uint32(0); k < n; k++ {
		var c uint32
		if scratch, c, err = m.remapSegment(r, scratch[:0]); err != nil {
			return wrapErr(err, r.Offset(), -1)
		}
		d.ElemEntries += uint64(c)
	}
	return nil
}

// scanCode adds what the function bodies of the code section s declare.
func (d *Declared) scanCode(m *module, s section) error {
	r := &Reader{b: s.body, base: s.off}
	n, err := r.U32()
	if err != nil {
		return wrapErr(err, r.Offset(), -1)
	}
	var sc bodyScan
	for k := uint32(0); k < n; k++ {
		fn := m.importedFuncs + int(k)
		size, err := r.U32()
		if err != nil {
			return wrapErr(err, r.Offset(), fn)
		}
		off := r.Offset()
		d.MaxFuncBytes = max(d.MaxFuncBytes, int(size))
		b, err := r.Take(int(size))
		if err != nil {
			return &Error{Offset: off, Func: fn, Reason: "body runs past the end of the code section"}
		}
		br := &Reader{b: b, base: off}
		locals, err := readLocals(br, 0)
		if err != nil {
			return wrapErr(err, br.Offset(), fn)
		}
		d.Locals += locals.n
		d.MaxFuncLocals = max(d.MaxFuncLocals, locals.n)
		blocks, err := sc.nesting(d, br)
		if err != nil {
			return wrapErr(err, br.Offset(), fn)
		}
		d.MaxBlocks = max(d.MaxBlocks, blocks)
		d.BlockWork += uint64(blocks) * uint64(blocks)
	}
	return nil
}

// bodyScan is the scratch state of Declarations, reused between function bodies.
type bodyScan struct {
	in    inst
	loops []bool // the open structures: true for a loop
}

// nesting adds the nesting of the code at r (a function body after its locals) to d, and
// returns its blocks (see Declared.MaxBlocks).
func (sc *bodyScan) nesting(d *Declared, r *Reader) (blocks int, err error) {
	sc.loops = sc.loops[:0]
	depth := 0
	for len(r.b) > 0 {
		if err := next(r, &sc.in); err != nil {
			return 0, err
		}
		d.DepthSum += uint64(len(sc.loops))
		switch op := sc.in.op; op {
		case opElse, opBr, opBrIf, opReturn:
			blocks++
		case opBrTable:
			blocks += 1 + len(sc.in.labels)/8
		case opBlock, opIf, opLoop:
			blocks++
			sc.loops = append(sc.loops, op == opLoop)
			if op == opLoop {
				depth++
				d.MaxLoopDepth = max(d.MaxLoopDepth, depth)
			}
			d.MaxDepth = max(d.MaxDepth, len(sc.loops))
		case opEnd:
			if n := len(sc.loops); n > 0 {
				if sc.loops[n-1] {
					depth--
				}
				sc.loops = sc.loops[:n-1]
			}
		}
	}
	return blocks, nil
}
