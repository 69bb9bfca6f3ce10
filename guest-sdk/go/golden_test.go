//go:build !wasip1

package wasmstream

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"
)

// The golden vectors of the ABI (abi/testdata/golden/README.md lists their values).
func golden(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "abi", "testdata", "golden", name+".hex"))
	if err != nil {
		t.Fatal(err)
	}
	var digits strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

// scriptHost is a host whose state_scan answers from a script of pages and that records the rest.
type scriptHost struct {
	metricOps []string
	t         *testing.T
	pages     [][]byte // state_scan answers, in order
	scans     []string // "after" of each state_scan call; "-" for from-first
	emits     [][]byte // headers argument of each emit
	failMsg   string
	permanent bool // fail_permanent was called
	getCalls  int
	value     []byte // state_get answer

	// ABI 0.2
	keyPages  [][]byte // state_keys answers, in order (an empty answer is ERR_BUFFER_TOO_SMALL)
	keysCalls []string // "after" of each state_keys call; "-" for from-first
	keysCaps  []int    // buf_cap of each state_keys call
	timerOps  []string // each timer_set / timer_delete call, formatted
	watermark int64
	httpReqs  [][]byte // the req argument of each http_request
	httpResp  []byte   // the response layout http_request answers
	httpErr   int32    // when < 0, http_request's answer
	httpKept  bool     // http_request kept httpResp (it did not fit)
}

func (h *scriptHost) StateGet(key, name, buf []byte) int32 {
	h.getCalls++
	if h.value == nil {
		return int32(abi.ErrNotFound)
	}
	if len(h.value) <= len(buf) {
		copy(buf, h.value)
	}
	return int32(len(h.value))
}
func (h *scriptHost) StatePut(key, name, value []byte) int32 { return 0 }
func (h *scriptHost) StateDelete(key, name []byte) int32     { return 0 }
func (h *scriptHost) StateScan(key, prefix, after []byte, fromFirst bool, buf []byte) int32 {
	if fromFirst {
		h.scans = append(h.scans, "-")
	} else {
		h.scans = append(h.scans, string(after))
	}
	if len(h.pages) == 0 {
		h.t.Fatal("unexpected state_scan")
	}
	p := h.pages[0]
	h.pages = h.pages[1:]
	return int32(copy(buf, p))
}
func (h *scriptHost) Emit(output, key, value, headers []byte, ts int64) int32 {
	h.emits = append(h.emits, append([]byte(nil), headers...))
	return 0
}
func (h *scriptHost) EmitNull(output, key, headers []byte, ts int64) int32 {
	return h.Emit(output, key, nil, headers, ts)
}
func (h *scriptHost) Log(level int32, msg []byte) int32 { return 0 }
func (h *scriptHost) NowMs() int64                      { return 0 }
func (h *scriptHost) ConfigGet(buf []byte) int32        { return 0 }
func (h *scriptHost) Fail(msg []byte) int32             { h.failMsg = string(msg); return 0 }
func (h *scriptHost) FailPermanent(msg []byte) int32 {
	h.failMsg, h.permanent = string(msg), true
	return 0
}
func (h *scriptHost) TimerSet(key, name []byte, domain int32, time int64, payload []byte) int32 {
	h.timerOps = append(h.timerOps, "set "+string(key)+"/"+string(name)+" d"+strconv.Itoa(int(domain))+
		" @"+strconv.FormatInt(time, 10)+" "+string(payload))
	return 0
}
func (h *scriptHost) TimerDelete(key, name []byte) int32 {
	h.timerOps = append(h.timerOps, "delete "+string(key)+"/"+string(name))
	return 0
}
func (h *scriptHost) WatermarkMs() int64 { return h.watermark }
func (h *scriptHost) MetricDeclare(kind int32, name, labels []byte) int32 {
	h.metricOps = append(h.metricOps, "declare "+strconv.Itoa(int(kind))+" "+string(name)+" "+strconv.Quote(string(labels)))
	if string(name) == "refused" {
		return int32(abi.ErrInvalid)
	}
	return int32(len(h.metricOps) - 1)
}
func (h *scriptHost) MetricAdd(id int32, v int64) int32 {
	h.metricOps = append(h.metricOps, "add "+strconv.Itoa(int(id))+" "+strconv.FormatInt(v, 10))
	return 0
}
func (h *scriptHost) MetricSet(id int32, v int64) int32 {
	h.metricOps = append(h.metricOps, "set "+strconv.Itoa(int(id))+" "+strconv.FormatInt(v, 10))
	return 0
}
func (h *scriptHost) MetricDeclareHistogram(name, labels, bounds []byte) int32 {
	h.metricOps = append(h.metricOps, "histogram "+string(name)+" "+strconv.Quote(string(labels))+" "+strconv.Quote(string(bounds)))
	return int32(len(h.metricOps) - 1)
}
func (h *scriptHost) MetricObserve(id int32, v float64) int32 {
	h.metricOps = append(h.metricOps, "observe "+strconv.Itoa(int(id))+" "+strconv.FormatFloat(v, 'g', -1, 64))
	return 0
}
func (h *scriptHost) StateKeys(after []byte, fromFirst bool, buf []byte) int32 {
	if fromFirst {
		h.keysCalls = append(h.keysCalls, "-")
	} else {
		h.keysCalls = append(h.keysCalls, string(after))
	}
	h.keysCaps = append(h.keysCaps, len(buf))
	if len(h.keyPages) == 0 {
		h.t.Fatal("unexpected state_keys")
	}
	p := h.keyPages[0]
	h.keyPages = h.keyPages[1:]
	if len(p) == 0 {
		return int32(abi.ErrBufferTooSmall)
	}
	return int32(copy(buf, p))
}
func (h *scriptHost) HTTPRequest(req, buf []byte) int32 {
	h.httpReqs = append(h.httpReqs, append([]byte(nil), req...))
	if h.httpErr < 0 {
		return h.httpErr
	}
	h.httpKept = len(h.httpResp) > len(buf)
	if !h.httpKept {
		copy(buf, h.httpResp)
	}
	return int32(len(h.httpResp))
}
func (h *scriptHost) HTTPResponse(buf []byte) int32 {
	if !h.httpKept {
		return int32(abi.ErrNotFound)
	}
	if len(h.httpResp) <= len(buf) {
		copy(buf, h.httpResp)
	}
	return int32(len(h.httpResp))
}

// install makes a fresh scriptHost the SDK's host and resets the registered handlers.
func install(t *testing.T) *scriptHost {
	h := &scriptHost{t: t}
	host.Current = h
	reset := func() {
		initFn, processFn, config = nil, nil, nil
		timerFn, tickFn, migrateFn, stateVersion = nil, nil, nil, 0
		metrics = nil
	}
	reset()
	t.Cleanup(func() { host.Current = nil; reset() })
	return h
}

// deliver writes payload into the buffer alloc returns, as a host does, and calls fn.
func deliver(t *testing.T, payload []byte, fn func(int32) int32) int32 {
	t.Helper()
	buf := alloc(int32(len(payload)))
	if len(buf) != len(payload) {
		t.Fatalf("alloc(%d) returned %d bytes", len(payload), len(buf))
	}
	copy(buf, payload)
	return fn(int32(len(payload)))
}

// seen is a copy of what a handler saw of one record.
type seen struct {
	key, value, source    string
	partition             uint32
	offset, ts            int64
	late                  bool
	headers               []string
	trace, empty, missing string
	hasEmpty, hasMissing  bool
}

func TestGoldenBatchTwo(t *testing.T) {
	install(t)
	var got []seen
	Handle(func(r *Record) error {
		s := seen{key: string(r.Key()), value: string(r.Value()), source: r.Source(),
			partition: r.Partition(), offset: r.Offset(), ts: r.Timestamp(), late: r.Late()}
		for _, h := range r.Headers() {
			s.headers = append(s.headers, string(h.Name)+"="+string(h.Value))
		}
		tr, _ := r.Header("trace")
		s.trace = string(tr)
		e, ok := r.Header("empty")
		s.empty, s.hasEmpty = string(e), ok
		m, ok := r.Header("missing")
		s.missing, s.hasMissing = string(m), ok
		got = append(got, s)
		return nil
	})
	if rc := deliver(t, golden(t, "batch_two"), callProcess); rc != 0 {
		t.Fatalf("process returned %d", rc)
	}
	want := []seen{
		{key: "alice", value: "hello world", source: "input", partition: 0, offset: 0, ts: 1700000000000},
		{key: "", value: "\x00\xff", source: "orders", partition: 3, offset: 42, ts: -1, late: true,
			headers: []string{"trace=abc", "empty="}, trace: "abc", hasEmpty: true},
	}
	if len(got) != len(want) {
		t.Fatalf("handler saw %d records, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.key != w.key || g.value != w.value || g.source != w.source || g.partition != w.partition ||
			g.offset != w.offset || g.ts != w.ts || g.late != w.late || strings.Join(g.headers, ",") != strings.Join(w.headers, ",") ||
			g.trace != w.trace || g.empty != w.empty || g.hasEmpty != w.hasEmpty || g.hasMissing {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func TestGoldenBatchEmpty(t *testing.T) {
	install(t)
	calls := 0
	Handle(func(r *Record) error { calls++; return nil })
	if rc := deliver(t, golden(t, "batch_empty"), callProcess); rc != 0 || calls != 0 {
		t.Fatalf("rc %d, %d handler calls", rc, calls)
	}
}

func TestGoldenInit(t *testing.T) {
	install(t)
	var cfg string
	HandleInit(func(c []byte) error { cfg = string(c); return nil })
	if rc := deliver(t, golden(t, "init"), callInit); rc != 0 {
		t.Fatalf("init returned %d", rc)
	}
	if cfg != `{"min_len":2}` || string(Config()) != cfg {
		t.Fatalf("init saw config %q, Config() = %q", cfg, Config())
	}
}

// Scan reads the golden page (a=1, b="", more=1), asks again after "b", and stops at the golden
// empty page.
func TestGoldenScanPage(t *testing.T) {
	h := install(t)
	h.pages = [][]byte{golden(t, "scan_page"), golden(t, "scan_page_empty")}
	var got []string
	err := StateOf([]byte("k")).Scan("", func(name, value []byte) bool {
		got = append(got, string(name)+"="+string(value))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a=1,b=" || strings.Join(h.scans, ",") != "-,b" {
		t.Fatalf("entries %q, scan calls with after %q", got, h.scans)
	}
}

func TestGoldenHeaders(t *testing.T) {
	h := install(t)
	err := EmitWith(Output{Name: "out", Headers: []Header{
		{Name: []byte("content-type"), Value: []byte("text/plain")}, {Name: []byte("x"), Value: []byte{}}}})
	if err != nil {
		t.Fatal(err)
	}
	// No headers are sent as hdr_len = 0, not as the headers_empty layout (both mean none).
	if err := EmitWith(Output{Name: "out", Headers: []Header{}}); err != nil {
		t.Fatal(err)
	}
	if err := Emit("out", nil, nil); err != nil {
		t.Fatal(err)
	}
	if len(h.emits) != 3 || !bytes.Equal(h.emits[0], golden(t, "headers")) || len(h.emits[1]) != 0 || len(h.emits[2]) != 0 {
		t.Fatalf("headers sent: %x", h.emits)
	}
}
