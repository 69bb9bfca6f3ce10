package fuel

import "fmt"

// LimitTables returns a copy of wasm whose tables together can never hold more than max
// elements: each table's declared maximum is lowered to its minimum plus an equal share of the
// room the minimums leave (max minus their sum), so that table.grow beyond it fails as the
// specification allows, returning -1. It returns an error when the minimums alone are over
// max, or when the table section cannot be decoded. Imported tables are not counted (the host
// provides none). wasm is returned unchanged when it defines no table.
func LimitTables(wasm []byte, max uint32) ([]byte, error) {
	m, err := parse(wasm)
	if err != nil {
		return nil, err
	}
	for _, s := range m.sections {
		if s.id != secTable {
			continue
		}
		body, err := limitTables(s, max)
		if err != nil {
			return nil, wrapErr(err, s.off, -1)
		}
		out := make([]byte, 0, len(wasm)+16)
		out = append(out, wasm[:s.hdr]...)
		out = appendSection(out, secTable, body)
		out = append(out, wasm[s.off+len(s.body):]...)
		return out, nil
	}
	return wasm, nil
}

// TableMinimumError is LimitTables' error for tables whose minimums are over the limit.
type TableMinimumError struct {
	Min, Max uint64
}

func (e *TableMinimumError) Error() string {
	return fmt.Sprintf("table minimum %d elements exceeds the limit of %d", e.Min, e.Max)
}

type tableType struct {
	prefix   []byte // 0x40 0x00 for a table with an initializer, else empty
	ref      []byte
	flags    byte
	min, max uint64
	hasMax   bool
	rest     []byte // the initializer expression, if any
}

// limitTables re-encodes the table section s with each table's maximum lowered so that the
// tables together hold at most limit elements.
func limitTables(s section, limit uint32) ([]byte, error) {
	r := &Reader{b: s.body, base: s.off}
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	if int(n) > len(r.b) {
		return nil, ErrTruncated
	}
	tables := make([]tableType, 0, n)
	var sum uint64
	for k := uint32(0); k < n; k++ {
		t, err := readTable(r)
		if err != nil {
			return nil, err
		}
		sum += t.min
		tables = append(tables, t)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("table section has %d bytes after its entries", len(r.b))
	}
	if sum > uint64(limit) {
		return nil, &TableMinimumError{Min: sum, Max: uint64(limit)}
	}
	share := (uint64(limit) - sum) / uint64(max(len(tables), 1))
	out := appendU32(nil, n)
	for _, t := range tables {
		mx := t.min + share
		if t.hasMax && t.max < mx {
			mx = t.max
		}
		out = append(out, t.prefix...)
		out = append(out, t.ref...)
		out = append(out, 0x01)
		out = appendU32(out, uint32(t.min))
		out = appendU32(out, uint32(mx))
		out = append(out, t.rest...)
	}
	return out, nil
}

// readTable reads one entry of the table section: its type, and its initializer if it has one.
func readTable(r *Reader) (tableType, error) {
	var t tableType
	var err error
	if len(r.b) >= 2 && r.b[0] == 0x40 && r.b[1] == 0x00 {
		t.prefix = r.b[:2]
		r.b, r.read = r.b[2:], r.read+2
	}
	if t.ref, err = refType(r, nil); err != nil {
		return t, err
	}
	if t.flags, err = r.Byte(); err != nil {
		return t, err
	}
	if t.flags&^1 != 0 {
		return t, fmt.Errorf("table with limits flags 0x%02x", t.flags)
	}
	if t.min, err = r.ULEB(32); err != nil {
		return t, err
	}
	if t.hasMax = t.flags&1 != 0; t.hasMax {
		if t.max, err = r.ULEB(32); err != nil {
			return t, err
		}
	}
	if t.prefix != nil {
		start := r.b
		var in inst
		for {
			if err := next(r, &in); err != nil {
				return t, err
			}
			if in.op == opEnd {
				break
			}
		}
		t.rest = start[:len(start)-len(r.b)]
	}
	return t, nil
}
