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
	// DepthSum is the sum over every instruction of the structures it is nested in: the work of
	// the runtime's compiler grows with it (about 10 ns a unit: 10,000 nested blocks, 10^8, take
	// about 1.5 s to compile), not with the module's size.
	DepthSum uint64
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
		if s.id == secCode {
			if err := d.scanCode(m, s); err != nil {
				return d, err
			}
		}
	}
	return d, nil
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
		if err := sc.nesting(d, br); err != nil {
			return wrapErr(err, br.Offset(), fn)
		}
	}
	return nil
}

// bodyScan is the scratch state of Declarations, reused between function bodies.
type bodyScan struct {
	in    inst
	loops []bool // the open structures: true for a loop
}

// nesting adds the nesting of the code at r (a function body after its locals) to d.
func (sc *bodyScan) nesting(d *Declared, r *Reader) error {
	sc.loops = sc.loops[:0]
	depth := 0
	for len(r.b) > 0 {
		if err := next(r, &sc.in); err != nil {
			return err
		}
		d.DepthSum += uint64(len(sc.loops))
		switch op := sc.in.op; op {
		case opBlock, opIf, opLoop:
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
	return nil
}
