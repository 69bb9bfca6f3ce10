package modrt

import (
	"errors"
	"fmt"
	"strings"

	"github.com/wasmstream/wasmstream/host/internal/fuel"
)

// This file reads just enough of a wasm binary (types, imports, functions, memories, exports) to
// check it against the ABI before compiling it, so a refused module costs no compilation and every
// problem is reported at once with a precise message. The runtime's own decoder still validates
// the whole binary afterwards.

// External kinds (wasm binary format §5.5.5).
const (
	kindFunc   = fuel.KindFunc
	kindTable  = fuel.KindTable
	kindMemory = fuel.KindMemory
	kindGlobal = fuel.KindGlobal
	kindTag    = fuel.KindTag
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

// located adds to a fuel.Reader error the offset its message leaves out.
func located(err error) error {
	var de *fuel.DecodeError
	if errors.As(err, &de) {
		return fmt.Errorf("%s at offset %d", de.Msg, de.Offset)
	}
	return err
}

// buildHint says how each guest language builds a module the host accepts.
const buildHint = "build Go with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared, " +
	"TinyGo with tinygo build -target=wasip1 -buildmode=c-shared -scheduler=none, " +
	"Rust with cargo build --release --target wasm32-unknown-unknown (the .wasm under target/wasm32-unknown-unknown/release)"

// nativeBinary names the kind of native executable bin is, as ", but …", or "" when it is none
// of those this knows.
func nativeBinary(bin []byte) string {
	switch {
	case len(bin) >= 4 && string(bin[:4]) == "\x7fELF":
		return ", but an ELF executable or shared library: built for the machine, not for wasm"
	case len(bin) >= 4 && (string(bin[:4]) == "\xcf\xfa\xed\xfe" || string(bin[:4]) == "\xce\xfa\xed\xfe"):
		return ", but a Mach-O executable or library: built for the machine, not for wasm"
	case len(bin) >= 2 && string(bin[:2]) == "MZ":
		return ", but a Windows executable or DLL: built for the machine, not for wasm"
	}
	return ""
}

// scanWasm reads the sections of a wasm binary that the ABI checks need.
func scanWasm(bin []byte) (*wasmShape, error) {
	if len(bin) < 8 || string(bin[:4]) != "\x00asm" {
		return nil, errors.New("not a WebAssembly binary (no \\0asm magic" + nativeBinary(bin) + "): " + buildHint)
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
	r := fuel.NewReader(bin[8:], 8)
	for r.Len() > 0 {
		id, _ := r.Byte()
		size, err := r.U32()
		if err != nil {
			return nil, fmt.Errorf("%s header: %w", sectionName(id), located(err))
		}
		start := r.Offset()
		body, err := r.Take(int(size))
		if err != nil {
			return nil, fmt.Errorf("%s at offset %d runs past the end of the binary (%d bytes declared, %d left: truncated?)",
				sectionName(id), start, size, r.Len())
		}
		sr := fuel.NewReader(body, start)
		sr.StrictLimits = true
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
			return nil, fmt.Errorf("%s: %w", sectionName(id), located(err))
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

func scanTypes(r *fuel.Reader, types *[]funcType) error {
	return r.Vec(func() error {
		params, results, err := r.FuncType()
		if err != nil {
			return err
		}
		*types = append(*types, sig(params, results))
		return nil
	})
}

func scanImports(r *fuel.Reader, s *wasmShape, funcTypes *[]uint32, typeOf func(uint32) (funcType, error)) error {
	return r.Vec(func() error {
		in, err := r.Import()
		if err != nil {
			return err
		}
		im := wasmImport{module: in.Module, name: in.Name, kind: in.Kind}
		if im.kind == kindFunc {
			if im.typ, err = typeOf(in.Type); err != nil {
				return err
			}
			*funcTypes = append(*funcTypes, in.Type)
		}
		s.imports = append(s.imports, im)
		return nil
	})
}

func scanFuncs(r *fuel.Reader, funcTypes *[]uint32) (err error) {
	*funcTypes, err = r.Indices(*funcTypes)
	return err
}

func scanMemories(r *fuel.Reader, s *wasmShape) error {
	return r.Vec(func() error {
		min, err := r.Limits()
		if err != nil {
			return err
		}
		s.memMins = append(s.memMins, min)
		return nil
	})
}

func scanExports(r *fuel.Reader, s *wasmShape, funcTypes []uint32, typeOf func(uint32) (funcType, error)) error {
	return r.Vec(func() error {
		e, err := r.Export()
		if err != nil {
			return err
		}
		ex := wasmExport{name: e.Name, kind: e.Kind}
		if ex.kind == kindFunc {
			if uint64(e.Index) >= uint64(len(funcTypes)) {
				return fmt.Errorf("export %q: function index %d out of range", ex.name, e.Index)
			}
			if ex.typ, err = typeOf(funcTypes[e.Index]); err != nil {
				return err
			}
		}
		s.exports = append(s.exports, ex)
		return nil
	})
}
