package abi

// Layouts added in ABI 0.2 (ABI.md §6.5–6.10). Like the 0.1 layouts, decoded byte fields are views
// into the buffer being decoded, and every decoder rejects lengths past the end, a wrong kind and
// trailing bytes with ErrMalformed.

// Firing is one timer firing of a Firings payload (ABI.md §6.5). Decoded byte fields are views
// into the payload.
type Firing struct {
	// Flags holds FiringEventTime for an event-time timer; other bits are 0.
	Flags     uint32
	Partition uint32
	// Time is the time the timer was set for, in ms since the epoch.
	Time    int64
	Key     []byte
	Name    []byte
	Payload []byte
}

// minFiringSize is the size of a Firing with empty key, name and payload.
const minFiringSize = 4 + 4 + 8 + 4 + 4 + 4

// AppendFiringsHeader appends the kind and count that start a Firings payload; the caller then
// appends count firings with AppendFiring.
func AppendFiringsHeader(b []byte, count int) []byte {
	return AppendU32(AppendU32(b, BatchFirings), uint32(count))
}

// AppendFiring appends one Firing layout.
func AppendFiring(b []byte, f *Firing) []byte {
	b = AppendU32(b, f.Flags)
	b = AppendU32(b, f.Partition)
	b = AppendU64(b, uint64(f.Time))
	b = AppendBytes(b, f.Key)
	b = AppendBytes(b, f.Name)
	return AppendBytes(b, f.Payload)
}

// FiringSize is the number of bytes AppendFiring appends for f.
func FiringSize(f *Firing) int {
	return minFiringSize + len(f.Key) + len(f.Name) + len(f.Payload)
}

// FiringsReader iterates over the firings of a Firings payload without copying, like BatchReader:
//
//	r, err := abi.NewFiringsReader(buf)
//	for r.Next() { f := r.Firing(); ... }
//	if err := r.Err(); err != nil { ... }
//
// A Firing's byte fields are views into buf.
type FiringsReader struct {
	d     decoder
	left  uint32
	f     Firing
	count uint32
}

// NewFiringsReader checks the payload's kind and returns a reader over its firings.
func NewFiringsReader(b []byte) (*FiringsReader, error) {
	r := &FiringsReader{}
	if err := r.Reset(b); err != nil {
		return nil, err
	}
	return r, nil
}

// Reset points the reader at a new Firings payload.
func (r *FiringsReader) Reset(b []byte) error {
	r.d = decoder{b: b}
	kind := r.d.u32()
	r.count = r.d.u32()
	r.left = r.count
	if r.d.err != nil {
		return r.d.err
	}
	if kind != BatchFirings || uint64(r.count)*minFiringSize > uint64(len(r.d.b)) {
		r.d.err = ErrMalformed
		return ErrMalformed
	}
	return nil
}

// Len is the number of firings the payload declares.
func (r *FiringsReader) Len() int { return int(r.count) }

// Next decodes the next firing; it returns false at the end or on a decoding error.
func (r *FiringsReader) Next() bool {
	if r.d.err != nil {
		return false
	}
	if r.left == 0 {
		r.d.finish()
		return false
	}
	r.left--
	d := &r.d
	r.f.Flags = d.u32()
	r.f.Partition = d.u32()
	r.f.Time = int64(d.u64())
	r.f.Key = d.bytes()
	r.f.Name = d.bytes()
	r.f.Payload = d.bytes()
	return d.err == nil
}

// Firing returns the firing decoded by the last successful Next.
func (r *FiringsReader) Firing() *Firing { return &r.f }

// Err returns the decoding error, if any, once Next has returned false.
func (r *FiringsReader) Err() error { return r.d.err }

// DecodeFirings decodes a whole Firings payload; byte fields are views into b.
func DecodeFirings(b []byte) ([]Firing, error) {
	r, err := NewFiringsReader(b)
	if err != nil {
		return nil, err
	}
	out := make([]Firing, 0, r.Len())
	for r.Next() {
		out = append(out, *r.Firing())
	}
	return out, r.Err()
}

// Tick is the argument of the guest's on_tick export (ABI.md §6.6). Source is a view when decoded.
type Tick struct {
	Partition uint32
	// Now is the processing time of the tick in ms.
	Now int64
	// Watermark is the partition's watermark in ms, or -1.
	Watermark int64
	// Source is the input name.
	Source []byte
}

// AppendTick appends the Tick layout, kind included.
func AppendTick(b []byte, t *Tick) []byte {
	b = AppendU32(b, BatchTick)
	b = AppendU32(b, t.Partition)
	b = AppendU64(b, uint64(t.Now))
	b = AppendU64(b, uint64(t.Watermark))
	return AppendBytes(b, t.Source)
}

// TickSize is the number of bytes AppendTick appends for t.
func TickSize(t *Tick) int { return 4 + 4 + 8 + 8 + 4 + len(t.Source) }

// DecodeTick decodes a Tick layout; Source is a view into b.
func DecodeTick(b []byte) (Tick, error) {
	d := decoder{b: b}
	if d.u32() != BatchTick && d.err == nil {
		return Tick{}, ErrMalformed
	}
	t := Tick{Partition: d.u32(), Now: int64(d.u64()), Watermark: int64(d.u64()), Source: d.bytes()}
	if err := d.finish(); err != nil {
		return Tick{}, err
	}
	return t, nil
}

// Migrate is the argument of the guest's migrate export (ABI.md §6.7). Key is a view when decoded.
type Migrate struct {
	// From is the key's recorded state version, To the module's.
	From, To  uint32
	Partition uint32
	Key       []byte
}

// AppendMigrate appends the Migrate layout, kind included.
func AppendMigrate(b []byte, m *Migrate) []byte {
	b = AppendU32(b, BatchMigrate)
	b = AppendU32(b, m.From)
	b = AppendU32(b, m.To)
	b = AppendU32(b, m.Partition)
	return AppendBytes(b, m.Key)
}

// MigrateSize is the number of bytes AppendMigrate appends for m.
func MigrateSize(m *Migrate) int { return 4 + 4 + 4 + 4 + 4 + len(m.Key) }

// DecodeMigrate decodes a Migrate layout; Key is a view into b.
func DecodeMigrate(b []byte) (Migrate, error) {
	d := decoder{b: b}
	if d.u32() != BatchMigrate && d.err == nil {
		return Migrate{}, ErrMalformed
	}
	m := Migrate{From: d.u32(), To: d.u32(), Partition: d.u32(), Key: d.bytes()}
	if err := d.finish(); err != nil {
		return Migrate{}, err
	}
	return m, nil
}

// AppendKeyPage appends a KeyPage layout (ABI.md §6.8).
func AppendKeyPage(b []byte, keys [][]byte, more bool) []byte {
	b = AppendU32(b, uint32(len(keys)))
	m := uint32(0)
	if more {
		m = 1
	}
	b = AppendU32(b, m)
	for _, k := range keys {
		b = AppendBytes(b, k)
	}
	return b
}

// KeyPageEntrySize is the number of bytes one key takes in a KeyPage.
func KeyPageEntrySize(key []byte) int { return 4 + len(key) }

// DecodeKeyPage decodes a KeyPage and reports its more flag; the keys are views into b. keys is
// reused.
func DecodeKeyPage(b []byte, keys [][]byte) ([][]byte, bool, error) {
	d := decoder{b: b}
	n := d.u32()
	more := d.u32()
	keys = keys[:0]
	if d.err == nil && (more > 1 || uint64(n)*4 > uint64(len(d.b))) {
		return keys, false, ErrMalformed
	}
	for i := uint32(0); i < n && d.err == nil; i++ {
		keys = append(keys, d.bytes())
	}
	if err := d.finish(); err != nil {
		return keys[:0], false, err
	}
	return keys, more == 1, nil
}

// HTTPRequest is the argument of http_request (ABI.md §6.9). Decoded byte fields are views.
type HTTPRequest struct {
	// Method is e.g. "GET" or "POST"; URL is an absolute http:// or https:// URL. The layout
	// does not check either; the host does.
	Method, URL []byte
	Headers     []Header
	Body        []byte
	// TimeoutMs is the request's timeout; 0 means the task's default.
	TimeoutMs uint32
}

// AppendHTTPRequest appends the HttpRequest layout.
func AppendHTTPRequest(b []byte, r *HTTPRequest) []byte {
	b = AppendBytes(b, r.Method)
	b = AppendBytes(b, r.URL)
	b = AppendHeaders(b, r.Headers)
	b = AppendBytes(b, r.Body)
	return AppendU32(b, r.TimeoutMs)
}

// HTTPRequestSize is the number of bytes AppendHTTPRequest appends for r.
func HTTPRequestSize(r *HTTPRequest) int {
	return 4 + len(r.Method) + 4 + len(r.URL) + headersSize(r.Headers) + 4 + len(r.Body) + 4
}

// DecodeHTTPRequest decodes an HttpRequest layout; byte fields are views into b.
func DecodeHTTPRequest(b []byte) (HTTPRequest, error) {
	d := decoder{b: b}
	r := HTTPRequest{Method: d.bytes(), URL: d.bytes(), Headers: d.headers(), Body: d.bytes(), TimeoutMs: d.u32()}
	if err := d.finish(); err != nil {
		return HTTPRequest{}, err
	}
	return r, nil
}

// HTTPResponse is an http_request result (ABI.md §6.10). Decoded byte fields are views.
type HTTPResponse struct {
	Status  uint32
	Headers []Header
	Body    []byte
}

// AppendHTTPResponse appends the HttpResponse layout.
func AppendHTTPResponse(b []byte, r *HTTPResponse) []byte {
	b = AppendU32(b, r.Status)
	b = AppendHeaders(b, r.Headers)
	return AppendBytes(b, r.Body)
}

// HTTPResponseSize is the number of bytes AppendHTTPResponse appends for r.
func HTTPResponseSize(r *HTTPResponse) int { return 4 + headersSize(r.Headers) + 4 + len(r.Body) }

// DecodeHTTPResponse decodes an HttpResponse layout; byte fields are views into b.
func DecodeHTTPResponse(b []byte) (HTTPResponse, error) {
	d := decoder{b: b}
	r := HTTPResponse{Status: d.u32(), Headers: d.headers(), Body: d.bytes()}
	if err := d.finish(); err != nil {
		return HTTPResponse{}, err
	}
	return r, nil
}

// headersSize is the number of bytes AppendHeaders appends for hs.
func headersSize(hs []Header) int {
	n := 4
	for _, h := range hs {
		n += 8 + len(h.Name) + len(h.Value)
	}
	return n
}
