package abi

import "errors"

// ErrMalformed is returned when a layout's lengths run past its buffer, its kind is unknown, or
// bytes trail its last element.
var ErrMalformed = errors.New("wasmstream abi: malformed layout")

// Header is one record or output header. Name and Value are views when decoded.
type Header struct {
	Name  []byte
	Value []byte
}

// Record is one record of a Batch (ABI.md §6.2). Decoded byte fields are views into the batch.
type Record struct {
	Flags     uint32
	Partition uint32
	Offset    int64
	Timestamp int64
	Source    []byte
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Init is the argument of the guest's init export (ABI.md §6.1).
type Init struct {
	Version uint32
	Task    []byte
	Config  []byte
}

// ScanEntry is one entry of a ScanPage (ABI.md §6.4).
type ScanEntry struct {
	Name  []byte
	Value []byte
}

// AppendU32 appends v little-endian.
func AppendU32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

// AppendU64 appends v little-endian.
func AppendU64(b []byte, v uint64) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24),
		byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
}

// AppendBytes appends a u32 length prefix and p.
func AppendBytes(b, p []byte) []byte {
	return append(AppendU32(b, uint32(len(p))), p...)
}

// U32 reads a little-endian u32 at the start of b; b must hold 4 bytes.
func U32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// U64 reads a little-endian u64 at the start of b; b must hold 8 bytes.
func U64(b []byte) uint64 {
	_ = b[7]
	return uint64(U32(b)) | uint64(U32(b[4:]))<<32
}

// AppendInit appends the Init layout.
func AppendInit(b []byte, in Init) []byte {
	b = AppendU32(b, in.Version)
	b = AppendBytes(b, in.Task)
	return AppendBytes(b, in.Config)
}

// DecodeInit decodes an Init layout; the byte fields are views into b.
func DecodeInit(b []byte) (Init, error) {
	d := decoder{b: b}
	in := Init{Version: d.u32(), Task: d.bytes(), Config: d.bytes()}
	return in, d.finish()
}

// AppendHeaders appends the Headers layout (ABI.md §6.3).
func AppendHeaders(b []byte, hs []Header) []byte {
	b = AppendU32(b, uint32(len(hs)))
	for _, h := range hs {
		b = AppendBytes(b, h.Name)
		b = AppendBytes(b, h.Value)
	}
	return b
}

// DecodeHeaders decodes a Headers layout. An empty b means no headers. The result's byte fields
// are views into b.
func DecodeHeaders(b []byte) ([]Header, error) {
	if len(b) == 0 {
		return nil, nil
	}
	d := decoder{b: b}
	hs := d.headers()
	return hs, d.finish()
}

// AppendBatchHeader appends the kind and count that start a Batch of records; the caller then
// appends count records with AppendRecord.
func AppendBatchHeader(b []byte, count int) []byte {
	return AppendU32(AppendU32(b, BatchRecords), uint32(count))
}

// AppendRecord appends one Record layout.
func AppendRecord(b []byte, r *Record) []byte {
	b = AppendU32(b, r.Flags)
	b = AppendU32(b, r.Partition)
	b = AppendU64(b, uint64(r.Offset))
	b = AppendU64(b, uint64(r.Timestamp))
	b = AppendBytes(b, r.Source)
	b = AppendBytes(b, r.Key)
	b = AppendBytes(b, r.Value)
	b = AppendU32(b, uint32(len(r.Headers)))
	for _, h := range r.Headers {
		b = AppendBytes(b, h.Name)
		b = AppendBytes(b, h.Value)
	}
	return b
}

// RecordSize is the number of bytes AppendRecord appends for r.
func RecordSize(r *Record) int {
	n := 4 + 4 + 8 + 8 + 4 + len(r.Source) + 4 + len(r.Key) + 4 + len(r.Value) + 4
	for _, h := range r.Headers {
		n += 8 + len(h.Name) + len(h.Value)
	}
	return n
}

// BatchReader iterates over the records of a Batch without copying:
//
//	r, err := abi.NewBatchReader(buf)
//	for r.Next() { rec := r.Record(); ... }
//	if err := r.Err(); err != nil { ... }
//
// A Record's byte fields are views into buf; Record reuses its Headers slice between calls to Next.
type BatchReader struct {
	d     decoder
	left  uint32
	rec   Record
	count uint32
}

// NewBatchReader checks the Batch's kind and returns a reader over its records.
func NewBatchReader(b []byte) (*BatchReader, error) {
	r := &BatchReader{}
	if err := r.Reset(b); err != nil {
		return nil, err
	}
	return r, nil
}

// Reset points the reader at a new batch, reusing its memory.
func (r *BatchReader) Reset(b []byte) error {
	r.d = decoder{b: b}
	kind := r.d.u32()
	r.count = r.d.u32()
	r.left = r.count
	if r.d.err != nil {
		return r.d.err
	}
	if kind != BatchRecords {
		r.d.err = ErrMalformed
		return ErrMalformed
	}
	// Every record takes at least 36 bytes: a count that cannot fit is malformed.
	if uint64(r.count)*36 > uint64(len(r.d.b)) {
		r.d.err = ErrMalformed
		return ErrMalformed
	}
	return nil
}

// Len is the number of records the batch declares.
func (r *BatchReader) Len() int { return int(r.count) }

// Next decodes the next record; it returns false at the end or on a decoding error.
func (r *BatchReader) Next() bool {
	if r.left > 0 && r.d.err == nil && r.nextCommon() {
		r.left--
		return true
	}
	return r.nextGeneral()
}

// nextGeneral is Next without the common case's path (a test compares both).
func (r *BatchReader) nextGeneral() bool {
	if r.d.err != nil {
		return false
	}
	if r.left == 0 {
		r.d.finish()
		return false
	}
	r.left--
	d := &r.d
	r.rec.Flags = d.u32()
	r.rec.Partition = d.u32()
	r.rec.Offset = int64(d.u64())
	r.rec.Timestamp = int64(d.u64())
	r.rec.Source = d.bytes()
	r.rec.Key = d.bytes()
	r.rec.Value = d.bytes()
	r.rec.Headers = d.appendHeaders(r.rec.Headers[:0])
	return d.err == nil
}

// nextCommon decodes the next record if it is whole and has no headers, the common case, in one
// pass over a local copy of the buffer: in a guest, where every call and every pointer stored
// to memory costs, this is several times cheaper than the general path through decoder. It
// reports false, having changed nothing, for anything else; Next then takes the general path,
// which also finds and reports what is malformed.
func (r *BatchReader) nextCommon() bool {
	b := r.d.b
	const fixed = 24 // flags, partition, offset, timestamp
	if len(b) < fixed+4 {
		return false
	}
	p := fixed
	var f [3][]byte // source, key, value
	for i := range f {
		if len(b)-p < 4 {
			return false
		}
		n := U32(b[p:])
		p += 4
		if uint64(n) > uint64(len(b)-p) {
			return false
		}
		e := p + int(n)
		f[i] = b[p:e:e]
		p = e
	}
	if len(b)-p < 4 || U32(b[p:]) != 0 {
		return false // headers: the general path
	}
	p += 4
	r.rec.Flags = U32(b)
	r.rec.Partition = U32(b[4:])
	r.rec.Offset = int64(U64(b[8:]))
	r.rec.Timestamp = int64(U64(b[16:]))
	r.rec.Source, r.rec.Key, r.rec.Value = f[0], f[1], f[2]
	r.rec.Headers = r.rec.Headers[:0]
	r.d.b = b[p:]
	return true
}

// Record returns the record decoded by the last successful Next.
func (r *BatchReader) Record() *Record { return &r.rec }

// Err returns the decoding error, if any, once Next has returned false.
func (r *BatchReader) Err() error { return r.d.err }

// DecodeBatch decodes a whole Batch into copies-free Records (views into b).
func DecodeBatch(b []byte) ([]Record, error) {
	r, err := NewBatchReader(b)
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, r.Len())
	for r.Next() {
		rec := *r.Record()
		rec.Headers = append([]Header(nil), rec.Headers...)
		out = append(out, rec)
	}
	return out, r.Err()
}

// AppendScanPage appends a ScanPage layout.
func AppendScanPage(b []byte, entries []ScanEntry, more bool) []byte {
	b = AppendU32(b, uint32(len(entries)))
	m := uint32(0)
	if more {
		m = 1
	}
	b = AppendU32(b, m)
	for _, e := range entries {
		b = AppendBytes(b, e.Name)
		b = AppendBytes(b, e.Value)
	}
	return b
}

// ScanEntrySize is the number of bytes one entry takes in a ScanPage.
func ScanEntrySize(name, value []byte) int { return 8 + len(name) + len(value) }

// DecodeScanPage decodes a ScanPage; byte fields are views into b. entries is reused.
func DecodeScanPage(b []byte, entries []ScanEntry) ([]ScanEntry, bool, error) {
	d := decoder{b: b}
	n := d.u32()
	more := d.u32()
	if d.err == nil && (more > 1 || uint64(n)*8 > uint64(len(d.b))) {
		return entries[:0], false, ErrMalformed
	}
	entries = entries[:0]
	for i := uint32(0); i < n && d.err == nil; i++ {
		entries = append(entries, ScanEntry{Name: d.bytes(), Value: d.bytes()})
	}
	return entries, more == 1, d.finish()
}

// decoder reads a layout front to back; the first error sticks and every later read returns zero.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n uint32) []byte {
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(d.b)) {
		d.err = ErrMalformed
		d.b = nil
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u32() uint32 {
	p := d.take(4)
	if p == nil {
		return 0
	}
	return U32(p)
}

func (d *decoder) u64() uint64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return U64(p)
}

func (d *decoder) bytes() []byte {
	n := d.u32()
	p := d.take(n)
	if p == nil && d.err == nil {
		return []byte{}
	}
	return p
}

func (d *decoder) headers() []Header { return d.appendHeaders(nil) }

func (d *decoder) appendHeaders(hs []Header) []Header {
	n := d.u32()
	if d.err != nil {
		return hs
	}
	if uint64(n)*8 > uint64(len(d.b)) {
		d.err = ErrMalformed
		return hs
	}
	for i := uint32(0); i < n && d.err == nil; i++ {
		hs = append(hs, Header{Name: d.bytes(), Value: d.bytes()})
	}
	return hs
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = ErrMalformed
	}
	return d.err
}
