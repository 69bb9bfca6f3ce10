package modrt

import (
	"errors"
	"fmt"
	"strings"
)

// This file reads just enough of a wasm binary (types, imports, functions, memories, exports) to
// check it against the ABI before compiling it, so a refused module costs no compilation and every
// problem is reported at once with a precise message. The runtime's own decoder still validates
// the whole binary afterwards.

// External kinds (wasm binary format §5.5.5).
const (
	kindFunc   = 0
	kindTable  = 1
	kindMemory = 2
	kindGlobal = 3
	kindTag    = 4
)

func kindName(k byte) string {
	switch k {
	case kindFunc:
		return "function"
	case kindTable:
		return "table"
	case kindMemory:
		return "memory"
	case kindGlobal:
		return "global"
	case kindTag:
		return "tag"
	}
	return fmt.Sprintf("kind %d", k)
}

// Value types as encoded in the binary format (the same bytes as wazero's api.ValueType).
const (
	valI32       = 0x7f
	valI64       = 0x7e
	valF32       = 0x7d
	valF64       = 0x7c
	valV128      = 0x7b
	valFuncref   = 0x70
	valExternref = 0x6f
)

func valName(v byte) string {
	switch v {
	case valI32:
		return "i32"
	case valI64:
		return "i64"
	case valF32:
		return "f32"
	case valF64:
		return "f64"
	case valV128:
		return "v128"
	case valFuncref:
		return "funcref"
	case valExternref:
		return "externref"
	}
	return fmt.Sprintf("0x%02x", v)
}

// funcType is a function signature; params and results hold binary-format value types.
type funcType struct {
	params, results string
}

func sig(params, results []byte) funcType { return funcType{string(params), string(results)} }

// String renders the signature as "(i32, i32) -> i32"; no results render as "-> ()".
func (t funcType) String() string {
	var b strings.Builder
	b.WriteByte('(')
	for i := 0; i < len(t.params); i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(valName(t.params[i]))
	}
	b.WriteString(") -> ")
	switch len(t.results) {
	case 0:
		b.WriteString("()")
	case 1:
		b.WriteString(valName(t.results[0]))
	default:
		b.WriteByte('(')
		for i := 0; i < len(t.results); i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(valName(t.results[i]))
		}
		b.WriteByte(')')
	}
	return b.String()
}

type wasmImport struct {
	module, name string
	kind         byte
	typ          funcType // functions only
}

type wasmExport struct {
	name string
	kind byte
	typ  funcType // functions only
}

// wasmShape is what scanWasm learns about a module.
type wasmShape struct {
	imports []wasmImport
	exports []wasmExport
	memMins []uint64 // minimum pages of each memory the module defines (not imports)
}

var errTruncated = errors.New("unexpected end of binary")

type binReader struct {
	b   []byte
	off int // offset of b[0] in the whole binary, for messages
}

func (r *binReader) byte() (byte, error) {
	if len(r.b) == 0 {
		return 0, errTruncated
	}
	c := r.b[0]
	r.b = r.b[1:]
	r.off++
	return c, nil
}

func (r *binReader) take(n uint64) ([]byte, error) {
	if n > uint64(len(r.b)) {
		return nil, errTruncated
	}
	p := r.b[:n]
	r.b = r.b[n:]
	r.off += int(n)
	return p, nil
}

// uleb reads an unsigned LEB128 of at most bits bits.
func (r *binReader) uleb(bits uint) (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift >= bits || (shift+7 > bits && uint64(c&0x7f)>>(bits-shift) != 0) {
			return 0, fmt.Errorf("integer too large at offset %d", r.off-1)
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *binReader) u32() (uint32, error) {
	v, err := r.uleb(32)
	return uint32(v), err
}

func (r *binReader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	p, err := r.take(uint64(n))
	return string(p), err
}

func (r *binReader) valTypes() ([]byte, error) {
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	return r.take(uint64(n))
}

// limits reads a limits / memory type and returns its minimum.
func (r *binReader) limits() (uint64, error) {
	flags, err := r.byte()
	if err != nil {
		return 0, err
	}
	if flags > 7 {
		return 0, fmt.Errorf("invalid limits flags 0x%02x at offset %d", flags, r.off-1)
	}
	bits := uint(32)
	if flags&4 != 0 { // memory64
		bits = 64
	}
	min, err := r.uleb(bits)
	if err != nil {
		return 0, err
	}
	if flags&1 != 0 {
		if _, err := r.uleb(bits); err != nil {
			return 0, err
		}
	}
	return min, nil
}

// scanWasm reads the sections of a wasm binary that the ABI checks need.
func scanWasm(bin []byte) (*wasmShape, error) {
	if len(bin) < 8 || string(bin[:4]) != "\x00asm" {
		return nil, errors.New("not a WebAssembly binary (no \\0asm magic)")
	}
	if v := uint32(bin[4]) | uint32(bin[5])<<8 | uint32(bin[6])<<16 | uint32(bin[7])<<24; v != 1 {
		return nil, fmt.Errorf("unsupported WebAssembly binary version %d", v)
	}
	var (
		s         wasmShape
		types     []funcType
		funcTypes []uint32 // type index of every function, imports first
	)
	typeOf := func(idx uint32) (funcType, error) {
		if uint64(idx) >= uint64(len(types)) {
			return funcType{}, fmt.Errorf("type index %d out of range", idx)
		}
		return types[idx], nil
	}
	r := &binReader{b: bin[8:], off: 8}
	for len(r.b) > 0 {
		id, _ := r.byte()
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("%s header: %w", sectionName(id), err)
		}
		start := r.off
		body, err := r.take(uint64(size))
		if err != nil {
			return nil, fmt.Errorf("%s at offset %d runs past the end of the binary (%d bytes declared, %d left: truncated?)",
				sectionName(id), start, size, len(r.b))
		}
		sr := &binReader{b: body, off: start}
		switch id {
		case 1:
			err = scanTypes(sr, &types)
		case 2:
			err = scanImports(sr, &s, &funcTypes, typeOf)
		case 3:
			err = scanFuncs(sr, &funcTypes)
		case 5:
			err = scanMemories(sr, &s)
		case 7:
			err = scanExports(sr, &s, funcTypes, typeOf)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sectionName(id), err)
		}
	}
	return &s, nil
}

var sectionNames = [...]string{"custom", "type", "import", "function", "table", "memory", "global",
	"export", "start", "element", "code", "data", "data count", "tag"}

func sectionName(id byte) string {
	if int(id) < len(sectionNames) {
		return sectionNames[id] + " section"
	}
	return fmt.Sprintf("unknown section %d", id)
}

func scanTypes(r *binReader, types *[]funcType) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		form, err := r.byte()
		if err != nil {
			return err
		}
		if form != 0x60 {
			return fmt.Errorf("unsupported type form 0x%02x at offset %d", form, r.off-1)
		}
		params, err := r.valTypes()
		if err != nil {
			return err
		}
		results, err := r.valTypes()
		if err != nil {
			return err
		}
		*types = append(*types, sig(params, results))
	}
	return nil
}

func scanImports(r *binReader, s *wasmShape, funcTypes *[]uint32, typeOf func(uint32) (funcType, error)) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		var im wasmImport
		if im.module, err = r.name(); err != nil {
			return err
		}
		if im.name, err = r.name(); err != nil {
			return err
		}
		if im.kind, err = r.byte(); err != nil {
			return err
		}
		switch im.kind {
		case kindFunc:
			idx, err := r.u32()
			if err != nil {
				return err
			}
			if im.typ, err = typeOf(idx); err != nil {
				return err
			}
			*funcTypes = append(*funcTypes, idx)
		case kindTable:
			if _, err = r.byte(); err == nil {
				_, err = r.limits()
			}
		case kindMemory:
			_, err = r.limits()
		case kindGlobal:
			_, err = r.take(2)
		case kindTag:
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			return fmt.Errorf("unknown import kind %d at offset %d", im.kind, r.off-1)
		}
		if err != nil {
			return err
		}
		s.imports = append(s.imports, im)
	}
	return nil
}

func scanFuncs(r *binReader, funcTypes *[]uint32) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		idx, err := r.u32()
		if err != nil {
			return err
		}
		*funcTypes = append(*funcTypes, idx)
	}
	return nil
}

func scanMemories(r *binReader, s *wasmShape) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		min, err := r.limits()
		if err != nil {
			return err
		}
		s.memMins = append(s.memMins, min)
	}
	return nil
}

func scanExports(r *binReader, s *wasmShape, funcTypes []uint32, typeOf func(uint32) (funcType, error)) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		var ex wasmExport
		if ex.name, err = r.name(); err != nil {
			return err
		}
		if ex.kind, err = r.byte(); err != nil {
			return err
		}
		idx, err := r.u32()
		if err != nil {
			return err
		}
		if ex.kind == kindFunc {
			if uint64(idx) >= uint64(len(funcTypes)) {
				return fmt.Errorf("export %q: function index %d out of range", ex.name, idx)
			}
			if ex.typ, err = typeOf(funcTypes[idx]); err != nil {
				return err
			}
		}
		s.exports = append(s.exports, ex)
	}
	return nil
}
