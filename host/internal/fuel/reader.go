package fuel

import (
	"errors"
	"fmt"
)

// ErrTruncated is the error of a Reader that runs out of input.
var ErrTruncated = errors.New("unexpected end of binary")

// DecodeError is a malformed encoding found by a Reader. Its message does not say where; Offset
// does.
type DecodeError struct {
	// Offset is the offset in the whole binary of the byte at fault.
	Offset int
	// Msg says what is wrong, e.g. "integer too large".
	Msg string
}

func (e *DecodeError) Error() string { return e.Msg }

// Reader decodes the primitives of the WebAssembly binary format (bytes, LEB128 integers,
// vectors, names, limits) from a part of a binary, keeping track of its offset in the whole
// binary. It also serves the runtime's module inspection, which checks a module against the
// ABI before compiling it.
type Reader struct {
	// StrictLimits makes Limits refuse flags other than those of a maximum (1), a shared
	// memory (2) and 64-bit bounds (4). The rewriter leaves that to the runtime.
	StrictLimits bool

	b    []byte
	base int // offset of the original b[0] in the binary
	read int // bytes consumed
}

// NewReader returns a Reader of b, which starts at offset off in the whole binary.
func NewReader(b []byte, off int) *Reader { return &Reader{b: b, base: off} }

// errorf returns a *DecodeError at the byte just read.
func (r *Reader) errorf(format string, args ...any) error {
	return &DecodeError{Offset: r.Offset() - 1, Msg: fmt.Sprintf(format, args...)}
}

// Offset is the offset in the whole binary of the next byte to read.
func (r *Reader) Offset() int { return r.base + r.read }

// Len is the number of bytes left.
func (r *Reader) Len() int { return len(r.b) }

// Byte reads one byte.
func (r *Reader) Byte() (byte, error) {
	if len(r.b) == 0 {
		return 0, ErrTruncated
	}
	c := r.b[0]
	r.b = r.b[1:]
	r.read++
	return c, nil
}

// Take reads n bytes; the result aliases the input.
func (r *Reader) Take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b) {
		return nil, ErrTruncated
	}
	p := r.b[:n]
	r.b = r.b[n:]
	r.read += n
	return p, nil
}

// ULEB reads an unsigned LEB128 of at most bits bits.
func (r *Reader) ULEB(bits uint) (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, err := r.Byte()
		if err != nil {
			return 0, err
		}
		if shift >= bits || (shift+7 > bits && uint64(c&0x7f)>>(bits-shift) != 0) {
			return 0, r.errorf("integer too large")
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

// SLEB reads a signed LEB128 of at most bits bits.
func (r *Reader) SLEB(bits uint) (int64, error) {
	var v int64
	for shift := uint(0); ; shift += 7 {
		c, err := r.Byte()
		if err != nil {
			return 0, err
		}
		if shift >= bits {
			return 0, r.errorf("integer too large")
		}
		v |= int64(c&0x7f) << shift
		if c&0x80 == 0 {
			if shift+7 < 64 && c&0x40 != 0 {
				v |= -1 << (shift + 7)
			}
			return v, nil
		}
	}
}

// U32 reads an unsigned LEB128 of at most 32 bits: a count, an index or a size.
func (r *Reader) U32() (uint32, error) {
	v, err := r.ULEB(32)
	return uint32(v), err
}

// Bytes reads a vector of bytes (a u32 length, then the bytes), such as the value types of a
// function type; the result aliases the input.
func (r *Reader) Bytes() ([]byte, error) {
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	return r.Take(int(n))
}

// Name reads a name (a vector of bytes, not checked to be UTF-8).
func (r *Reader) Name() (string, error) {
	p, err := r.Bytes()
	return string(p), err
}

// Limits reads the limits of a table or memory type and returns the minimum.
func (r *Reader) Limits() (uint64, error) {
	flags, err := r.Byte()
	if err != nil {
		return 0, err
	}
	if r.StrictLimits && flags > 7 {
		return 0, r.errorf("invalid limits flags 0x%02x", flags)
	}
	bits := uint(32)
	if flags&4 != 0 { // memory64
		bits = 64
	}
	min, err := r.ULEB(bits)
	if err != nil {
		return 0, err
	}
	if flags&1 != 0 {
		if _, err := r.ULEB(bits); err != nil {
			return 0, err
		}
	}
	return min, nil
}

// Vec reads a vector: its u32 count, then each element with read, stopping at the first error.
func (r *Reader) Vec(read func() error) error {
	n, err := r.U32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		if err := read(); err != nil {
			return err
		}
	}
	return nil
}

// Indices reads a vector of u32, such as the function section, and appends it to dst.
func (r *Reader) Indices(dst []uint32) ([]uint32, error) {
	err := r.Vec(func() error {
		v, err := r.U32()
		if err == nil {
			dst = append(dst, v)
		}
		return err
	})
	return dst, err
}

// FuncType reads a function type (an entry of the type section) and returns its parameter and
// result value types, as encoded; they alias the input.
func (r *Reader) FuncType() (params, results []byte, err error) {
	form, err := r.Byte()
	if err != nil {
		return nil, nil, err
	}
	if form != 0x60 {
		return nil, nil, r.errorf("unsupported type form 0x%02x", form)
	}
	if params, err = r.Bytes(); err != nil {
		return nil, nil, err
	}
	if results, err = r.Bytes(); err != nil {
		return nil, nil, err
	}
	return params, results, nil
}

// External kinds (binary format §5.5.5), of imports and exports.
const (
	KindFunc   = 0
	KindTable  = 1
	KindMemory = 2
	KindGlobal = 3
	KindTag    = 4
)

// Import is an entry of the import section.
type Import struct {
	Module, Name string
	Kind         byte   // a Kind constant
	Type         uint32 // the type index of a function
}

// Import reads an entry of the import section. Of what it imports, it keeps only the type of a
// function.
func (r *Reader) Import() (Import, error) {
	var (
		im  Import
		err error
	)
	if im.Module, err = r.Name(); err != nil {
		return im, err
	}
	if im.Name, err = r.Name(); err != nil {
		return im, err
	}
	if im.Kind, err = r.Byte(); err != nil {
		return im, err
	}
	switch im.Kind {
	case KindFunc:
		im.Type, err = r.U32()
	case KindTable: // reftype, limits
		if _, err = r.Byte(); err == nil {
			_, err = r.Limits()
		}
	case KindMemory:
		_, err = r.Limits()
	case KindGlobal: // valtype, mutability
		_, err = r.Take(2)
	case KindTag: // attribute, type index
		if _, err = r.Byte(); err == nil {
			_, err = r.U32()
		}
	default:
		return im, r.errorf("unknown import kind %d", im.Kind)
	}
	return im, err
}

// Export is an entry of the export section.
type Export struct {
	Name  string
	Kind  byte // a Kind constant
	Index uint32
}

// Export reads an entry of the export section.
func (r *Reader) Export() (Export, error) {
	var (
		ex  Export
		err error
	)
	if ex.Name, err = r.Name(); err != nil {
		return ex, err
	}
	if ex.Kind, err = r.Byte(); err != nil {
		return ex, err
	}
	ex.Index, err = r.U32()
	return ex, err
}
