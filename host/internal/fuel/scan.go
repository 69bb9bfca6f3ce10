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
		if s.id != secCode {
			continue
		}
		r := &Reader{b: s.body, base: s.off}
		n, err := r.U32()
		if err != nil {
			return d, wrapErr(err, r.Offset(), -1)
		}
		var (
			in    inst
			loops []bool // the open structures: true for a loop
		)
		for k := uint32(0); k < n; k++ {
			fn := m.importedFuncs + int(k)
			size, err := r.U32()
			if err != nil {
				return d, wrapErr(err, r.Offset(), fn)
			}
			off := r.Offset()
			b, err := r.Take(int(size))
			if err != nil {
				return d, &Error{Offset: off, Func: fn, Reason: "body runs past the end of the code section"}
			}
			br := &Reader{b: b, base: off}
			groups, err := br.U32()
			if err != nil {
				return d, wrapErr(err, br.Offset(), fn)
			}
			var locals uint64
			for g := uint32(0); g < groups; g++ {
				c, err := br.U32()
				if err != nil {
					return d, wrapErr(err, br.Offset(), fn)
				}
				if _, err := br.SLEB(33); err != nil {
					return d, wrapErr(err, br.Offset(), fn)
				}
				locals += uint64(c)
			}
			d.Locals += locals
			d.MaxFuncLocals = max(d.MaxFuncLocals, locals)
			loops = loops[:0]
			depth := 0
			for len(br.b) > 0 {
				if err := next(br, &in); err != nil {
					return d, wrapErr(err, br.Offset(), fn)
				}
				d.DepthSum += uint64(len(loops))
				switch in.op {
				case opBlock, opIf, opLoop:
					loops = append(loops, in.op == opLoop)
					if in.op == opLoop {
						depth++
						d.MaxLoopDepth = max(d.MaxLoopDepth, depth)
					}
					d.MaxDepth = max(d.MaxDepth, len(loops))
				case opEnd:
					if len(loops) > 0 {
						if loops[len(loops)-1] {
							depth--
						}
						loops = loops[:len(loops)-1]
					}
				}
			}
		}
	}
	return d, nil
}
