package fuel

import "fmt"

// The slice import shifts every defined function's index by one: the import is appended after
// the module's own imports, and defined functions are numbered after all imports. Everything
// that names a function by index is rewritten in the same pass: call, return_call and ref.func
// in code (instrumentFunc), exports, the start function, element segments, ref.func in global
// initializers, and the function, local and label names of the "name" section.

// fn returns the index in the rewritten module of the original module's function f.
func (m *module) fn(f uint32) uint32 {
	if f >= uint32(m.importedFuncs) {
		return f + 1
	}
	return f
}

// copyExpr copies a constant expression (up to and including its end) from r to out, with the
// indices of ref.func remapped.
func (m *module) copyExpr(r *Reader, out []byte) ([]byte, error) {
	var in inst
	for {
		start := r.b
		if err := next(r, &in); err != nil {
			return nil, err
		}
		switch in.op {
		case 0xd2:
			out = append(out, 0xd2)
			out = appendU32(out, m.fn(in.fn))
		case opBlock, opLoop, opIf:
			return nil, fmt.Errorf("opcode 0x%02x in a constant expression", in.op)
		default:
			out = append(out, start[:len(start)-len(r.b)]...)
		}
		if in.op == opEnd {
			return out, nil
		}
	}
}

// refType copies a reference or value type: one byte, or a typed reference (0x63, 0x64) and its
// heap type.
func refType(r *Reader, out []byte) ([]byte, error) {
	start := r.b
	t, err := r.Byte()
	if err != nil {
		return nil, err
	}
	if t == 0x63 || t == 0x64 {
		if _, err := r.SLEB(33); err != nil {
			return nil, err
		}
	}
	return append(out, start[:len(start)-len(r.b)]...), nil
}

// remapExports re-encodes the entries of the export section (without its count) with function
// indices remapped.
func (m *module) remapExports(r *Reader, n uint32, out []byte) ([]byte, error) {
	for k := uint32(0); k < n; k++ {
		ex, err := r.Export()
		if err != nil {
			return nil, err
		}
		if ex.Kind == KindFunc {
			ex.Index = m.fn(ex.Index)
		}
		out = appendName(out, ex.Name)
		out = append(out, ex.Kind)
		out = appendU32(out, ex.Index)
	}
	return out, nil
}

// remapGlobals re-encodes the n entries of the global section with ref.func remapped.
func (m *module) remapGlobals(r *Reader, n uint32, out []byte) ([]byte, error) {
	var err error
	for k := uint32(0); k < n; k++ {
		if out, err = refType(r, out); err != nil {
			return nil, err
		}
		mut, err := r.Byte()
		if err != nil {
			return nil, err
		}
		out = append(out, mut)
		if out, err = m.copyExpr(r, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// remapElements re-encodes the element section with function indices remapped.
func (m *module) remapElements(body []byte, off int) ([]byte, error) {
	r := &Reader{b: body, base: off}
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	out := appendU32(make([]byte, 0, len(body)+len(body)/8), n)
	for k := uint32(0); k < n; k++ {
		if out, _, err = m.remapSegment(r, out); err != nil {
			return nil, err
		}
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("element section has %d bytes after its entries", len(r.b))
	}
	return out, nil
}

// remapSegment appends the element segment at r, with function indices remapped, to out, and
// returns how many elements it holds.
func (m *module) remapSegment(r *Reader, out []byte) (_ []byte, elems uint32, err error) {
	flags, err := r.U32()
	if err != nil {
		return nil, 0, err
	}
	if flags > 7 {
		return nil, 0, fmt.Errorf("element segment with flags %d", flags)
	}
	out = appendU32(out, flags)
	if flags&2 != 0 && flags&1 == 0 { // explicit table index
		t, err := r.U32()
		if err != nil {
			return nil, 0, err
		}
		out = appendU32(out, t)
	}
	if flags&1 == 0 { // active: an offset
		if out, err = m.copyExpr(r, out); err != nil {
			return nil, 0, err
		}
	}
	exprs := flags&4 != 0
	if flags&3 != 0 { // an element kind or reference type
		if exprs {
			out, err = refType(r, out)
		} else {
			var kind byte
			kind, err = r.Byte()
			out = append(out, kind)
		}
		if err != nil {
			return nil, 0, err
		}
	}
	c, err := r.U32()
	if err != nil {
		return nil, 0, err
	}
	if int(c) > len(r.b) {
		return nil, 0, ErrTruncated
	}
	out = appendU32(out, c)
	for e := uint32(0); e < c; e++ {
		if exprs {
			if out, err = m.copyExpr(r, out); err != nil {
				return nil, 0, err
			}
			continue
		}
		f, err := r.U32()
		if err != nil {
			return nil, 0, err
		}
		out = appendU32(out, m.fn(f))
	}
	return out, c, nil
}

// remapNames re-encodes the "name" custom section (body after its name) with the function
// indices of its function (1), local (2) and label (3) subsections remapped, or returns false
// when it cannot be decoded: the runtime ignores a malformed name section, so the caller drops it.
func (m *module) remapNames(body []byte) ([]byte, bool) {
	r := &Reader{b: body}
	out := make([]byte, 0, len(body)+16)
	for len(r.b) > 0 {
		id, err := r.Byte()
		if err != nil {
			return nil, false
		}
		sub, err := r.Bytes()
		if err != nil {
			return nil, false
		}
		if id < 1 || id > 3 {
			out = append(out, id)
			out = appendU32(out, uint32(len(sub)))
			out = append(out, sub...)
			continue
		}
		sr := &Reader{b: sub}
		n, err := sr.U32()
		if err != nil {
			return nil, false
		}
		enc := appendU32(make([]byte, 0, len(sub)+8), n)
		for k := uint32(0); k < n; k++ {
			f, err := sr.U32()
			if err != nil {
				return nil, false
			}
			enc = appendU32(enc, m.fn(f))
			start := sr.b
			if id == 1 {
				if _, err := sr.Bytes(); err != nil {
					return nil, false
				}
			} else {
				// An inner name map: a vector of (index, name), copied as it is.
				err := sr.Vec(func() error {
					if _, err := sr.U32(); err != nil {
						return err
					}
					_, err := sr.Bytes()
					return err
				})
				if err != nil {
					return nil, false
				}
			}
			enc = append(enc, start[:len(start)-len(sr.b)]...)
		}
		if len(sr.b) != 0 {
			return nil, false
		}
		out = append(out, id)
		out = appendU32(out, uint32(len(enc)))
		out = append(out, enc...)
	}
	return out, true
}
