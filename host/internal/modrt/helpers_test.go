package modrt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

// The WAT fixtures in testdata are compiled to the committed .wasm files with wabt:
//
//go:generate sh -c "for f in testdata/*.wat; do wat2wasm $DOLLAR{f} -o $DOLLAR{f%.wat}.wasm; done"

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newRuntime(t testing.TB, cfg RuntimeConfig) *Runtime {
	t.Helper()
	r, err := NewRuntime(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return r
}

func compile(t testing.TB, r *Runtime, name string, lim Limits) *Module {
	t.Helper()
	m, err := r.Compile(context.Background(), fixture(t, name), lim)
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

func instantiate(t testing.TB, m *Module, cfg InstanceConfig) *Instance {
	t.Helper()
	if cfg.Task == "" {
		cfg.Task = "t"
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return 1234 }
	}
	i, err := m.Instantiate(context.Background(), cfg)
	if err != nil {
		t.Fatalf("instantiate: %v", err)
	}
	t.Cleanup(func() { _ = i.Close(context.Background()) })
	return i
}

// hostResult is one host function call observed on the host side.
type hostResult struct {
	fn int
	r  int64
}

func (h hostResult) String() string {
	return hostFuncs[h.fn].name + "=" + abi.Errno(h.r).String()
}

// observe records every host function result of i.
func observe(i *Instance) *[]hostResult {
	var rs []hostResult
	i.observer = func(fn int, r int64) { rs = append(rs, hostResult{fn, r}) }
	return &rs
}

// results returns the statuses of the observed calls to fn.
func results(rs []hostResult, fn int) []int64 {
	var out []int64
	for _, r := range rs {
		if r.fn == fn {
			out = append(out, r.r)
		}
	}
	return out
}

// ---- driver programs (see testdata/driver.wat) ----

const (
	opStateGet = iota
	opStatePut
	opStateDelete
	opStateScan
	opEmit
	opLog
	opNowMs
	opConfigGet
	opFail
	opReturn
	opTrap
	// driver02 only (testdata/driver02.wat).
	opTimerSet    // 7 args and the time
	opTimerDelete // 4 args
	opWatermarkMs // stores the result at arg 0
	opStateKeys   // 4 args
	opEmitLast    // emits the bytes the latest host function op reported
	opSetVersion  // sets wasmstream_state_version
)

var opArgs = [...]int{6, 6, 4, 8, 8, 3, 0, 2, 2, 1, 0, 7, 4, 1, 4, 3, 1}

// wideOp reports whether op id carries an i64 after its arguments (emit's ts, timer_set's time).
func wideOp(id byte) bool { return id == opEmit || id == opTimerSet }

// scratch is a free region of the driver's memory (0x8000-0xffff) for output buffers.
const scratch = 0x8000

type parg struct {
	v   int32
	rel bool // v is an offset into the program's data
}

func abs(v int32) parg { return parg{v: v} }

type progOp struct {
	id   byte
	args []parg
	ts   int64
}

// prog builds a driver program: ops followed by the data they point at.
type prog struct {
	ops  []progOp
	data []byte
}

// blob adds b to the program's data and returns its (pointer, length) arguments.
func (p *prog) blob(b string) (parg, parg) {
	off := len(p.data)
	p.data = append(p.data, b...)
	return parg{v: int32(off), rel: true}, abs(int32(len(b)))
}

func (p *prog) op(id byte, args ...parg) *prog {
	if len(args) != opArgs[id] {
		panic("wrong argument count")
	}
	p.ops = append(p.ops, progOp{id: id, args: args})
	return p
}

func (p *prog) get(key, name string, buf, capacity int32) *prog {
	kp, kl := p.blob(key)
	np, nl := p.blob(name)
	return p.op(opStateGet, kp, kl, np, nl, abs(buf), abs(capacity))
}

func (p *prog) put(key, name, val string) *prog {
	kp, kl := p.blob(key)
	np, nl := p.blob(name)
	vp, vl := p.blob(val)
	return p.op(opStatePut, kp, kl, np, nl, vp, vl)
}

func (p *prog) del(key, name string) *prog {
	kp, kl := p.blob(key)
	np, nl := p.blob(name)
	return p.op(opStateDelete, kp, kl, np, nl)
}

// scan scans from the start when after is nil.
func (p *prog) scan(key, prefix string, after *string, buf, capacity int32) *prog {
	kp, kl := p.blob(key)
	pp, pl := p.blob(prefix)
	ap, al := abs(0), abs(-1)
	if after != nil {
		ap, al = p.blob(*after)
	}
	return p.op(opStateScan, kp, kl, pp, pl, ap, al, abs(buf), abs(capacity))
}

func (p *prog) emit(out, key, val string, hdr []byte, ts int64) *prog {
	op, ol := p.blob(out)
	kp, kl := p.blob(key)
	vp, vl := p.blob(val)
	hp, hl := p.blob(string(hdr))
	p.op(opEmit, op, ol, kp, kl, vp, vl, hp, hl)
	p.ops[len(p.ops)-1].ts = ts
	return p
}

// emitAbs emits n bytes of driver memory at ptr (e.g. a buffer filled by state_get).
func (p *prog) emitAbs(out, key string, ptr, n int32) *prog {
	op, ol := p.blob(out)
	kp, kl := p.blob(key)
	p.op(opEmit, op, ol, kp, kl, abs(ptr), abs(n), abs(0), abs(0))
	p.ops[len(p.ops)-1].ts = -1
	return p
}

func (p *prog) log(level int32, msg string) *prog {
	mp, ml := p.blob(msg)
	return p.op(opLog, abs(level), mp, ml)
}

func (p *prog) fail(msg string) *prog {
	mp, ml := p.blob(msg)
	return p.op(opFail, mp, ml)
}

func (p *prog) ret(code int32) *prog { return p.op(opReturn, abs(code)) }

// wide adds op id with its arguments and the i64 v (emit's ts, timer_set's time).
func (p *prog) wide(id byte, v int64, args ...parg) *prog {
	p.op(id, args...)
	p.ops[len(p.ops)-1].ts = v
	return p
}

// timerSet calls timer_set (driver02 only).
func (p *prog) timerSet(key, name string, domain int32, due int64, payload string) *prog {
	kp, kl := p.blob(key)
	np, nl := p.blob(name)
	pp, pl := p.blob(payload)
	return p.wide(opTimerSet, due, kp, kl, np, nl, abs(domain), pp, pl)
}

// timerDelete calls timer_delete (driver02 only).
func (p *prog) timerDelete(key, name string) *prog {
	kp, kl := p.blob(key)
	np, nl := p.blob(name)
	return p.op(opTimerDelete, kp, kl, np, nl)
}

// watermark calls watermark_ms and stores its result at dst, 8 bytes little-endian (driver02 only).
func (p *prog) watermark(dst int32) *prog { return p.op(opWatermarkMs, abs(dst)) }

// keys calls state_keys from the first key when after is nil (driver02 only).
func (p *prog) keys(after *string, buf, capacity int32) *prog {
	ap, al := abs(0), abs(-1)
	if after != nil {
		ap, al = p.blob(*after)
	}
	return p.op(opStateKeys, ap, al, abs(buf), abs(capacity))
}

// emitLast emits to out the bytes at buf whose length the latest host function op returned
// (nothing when it returned an error; driver02 only).
func (p *prog) emitLast(out string, buf int32) *prog {
	op, ol := p.blob(out)
	return p.op(opEmitLast, op, ol, abs(buf))
}

// setVersion makes driver02's wasmstream_state_version return v.
func (p *prog) setVersion(v int32) *prog { return p.op(opSetVersion, abs(v)) }

func (p *prog) bytes() []byte {
	opsLen := 0
	for _, o := range p.ops {
		opsLen += 2 + 4*len(o.args)
		if wideOp(o.id) {
			opsLen += 8
		}
	}
	var b []byte
	for _, o := range p.ops {
		mask := byte(0)
		for j, a := range o.args {
			if a.rel {
				mask |= 1 << j
			}
		}
		b = append(b, o.id, mask)
		for _, a := range o.args {
			v := a.v
			if a.rel {
				v += int32(opsLen)
			}
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
		if wideOp(o.id) {
			b = binary.LittleEndian.AppendUint64(b, uint64(o.ts))
		}
	}
	return append(b, p.data...)
}

func rec(key string, value []byte) abi.Record {
	return abi.Record{Offset: 7, Timestamp: -1, Source: []byte("in"), Key: []byte(key), Value: value}
}

// ---- a map-backed Env ----

type memEnv struct {
	state  map[string]map[string][]byte
	getErr error
}

func newEnv(kv map[string]map[string]string) *memEnv {
	e := &memEnv{state: map[string]map[string][]byte{}}
	for k, m := range kv {
		e.state[k] = map[string][]byte{}
		for n, v := range m {
			e.state[k][n] = []byte(v)
		}
	}
	return e
}

func (e *memEnv) StateGet(key, name []byte) ([]byte, bool, error) {
	if e.getErr != nil {
		return nil, false, e.getErr
	}
	v, ok := e.state[string(key)][string(name)]
	return v, ok, nil
}

func (e *memEnv) StateScan(key, prefix, after []byte, fromStart bool, fn func(name, val []byte) bool) error {
	m := e.state[string(key)]
	names := make([]string, 0, len(m))
	for n := range m {
		if strings.HasPrefix(n, string(prefix)) && (fromStart || n > string(after)) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		if !fn([]byte(n), m[n]) {
			return nil
		}
	}
	return nil
}

// ---- a recording slog handler ----

type logRec struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

type recHandler struct {
	mu    *sync.Mutex
	recs  *[]logRec
	attrs []slog.Attr
}

func newLogger() (*slog.Logger, func() []logRec) {
	h := &recHandler{mu: new(sync.Mutex), recs: new([]logRec)}
	return slog.New(h), func() []logRec {
		h.mu.Lock()
		defer h.mu.Unlock()
		return slices.Clone(*h.recs)
	}
}

func (h *recHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recHandler) Handle(_ context.Context, r slog.Record) error {
	lr := logRec{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		lr.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		lr.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	*h.recs = append(*h.recs, lr)
	h.mu.Unlock()
	return nil
}

func (h *recHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recHandler{mu: h.mu, recs: h.recs, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *recHandler) WithGroup(string) slog.Handler { return h }

// ---- assertions ----

func asCallError(t testing.TB, err error) *CallError {
	t.Helper()
	var ce *CallError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a *CallError", err, err)
	}
	return ce
}

func le32s(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for k := range out {
		out[k] = int32(binary.LittleEndian.Uint32(b[4*k:]))
	}
	return out
}

func eqBytes(t testing.TB, what string, got []byte, want string) {
	t.Helper()
	if !bytes.Equal(got, []byte(want)) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

func fmtOutputs(os []Output) string {
	var b strings.Builder
	for _, o := range os {
		fmt.Fprintf(&b, "{%s %q=%q ts=%d", o.Name, o.Key, o.Value, o.Timestamp)
		for _, h := range o.Headers {
			fmt.Fprintf(&b, " %q:%q", h.Name, h.Value)
		}
		b.WriteString("}")
	}
	return b.String()
}
