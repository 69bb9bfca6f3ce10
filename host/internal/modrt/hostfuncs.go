package modrt

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"slices"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/store"
)

// The wasmstream_v0 host functions (ABI.md §4). Each takes its arguments from the wasm value stack
// and writes its status back to stack[0]. The rules every one of them follows:
//
//   - Every (pointer, length) pair is checked first: a negative length, or a range that runs past
//     the end of memory (computed in 64 bits, so ptr+len cannot wrap) is ERR_OUT_OF_BOUNDS. A
//     length of 0 is an empty byte string whatever the pointer (ABI §4) and is never read. Nothing
//     panics and nothing is written on any error.
//   - Then the phase: state and emit outside wasmstream_process (and state when the instance is
//     StatelessOnly) are ERR_NOT_ALLOWED.
//   - Bytes read from the guest are views valid only inside the host function; everything kept is
//     copied.

// Host function ids, in abi.HostFuncs order; used by tests to observe results.
const (
	hfStateGet = iota
	hfStatePut
	hfStateDelete
	hfStateScan
	hfEmit
	hfLog
	hfNowMs
	hfConfigGet
	hfFail
	hfTimerSet
	hfTimerDelete
	hfWatermarkMs
	hfStateKeys
	hfHTTPRequest
	hfHTTPResponse
	hfMetricDeclare
	hfMetricAdd
	hfMetricSet
	hfMetricDeclareHistogram
	hfMetricObserve
	hfFailPermanent
	hfCount
)

// hostFunc describes one host function: its ABI name and signature and its implementation, which
// returns the status (or, for now_ms, the time).
type hostFunc struct {
	name    string
	params  []byte
	results []byte
	fn      func(i *Instance, ctx context.Context, s []uint64) int64
}

func i32s(n int) []byte { return bytes.Repeat([]byte{valI32}, n) }

var hostFuncs = [hfCount]hostFunc{
	hfStateGet: {abi.FuncStateGet, i32s(6), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.stateGet(u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4]), u32(s[5]))
	}},
	hfStatePut: {abi.FuncStatePut, i32s(6), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.statePut(u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4]), u32(s[5]), false)
	}},
	hfStateDelete: {abi.FuncStateDelete, i32s(4), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.statePut(u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3]), 0, 0, true)
	}},
	hfStateScan: {abi.FuncStateScan, i32s(8), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.stateScan(u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4]), u32(s[5]), u32(s[6]), u32(s[7]))
	}},
	hfEmit: {abi.FuncEmit, append(i32s(8), valI64), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.emit(u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4]), u32(s[5]), u32(s[6]), u32(s[7]), int64(s[8]))
	}},
	hfLog: {abi.FuncLog, i32s(3), i32s(1), func(i *Instance, ctx context.Context, s []uint64) int64 {
		return i.logMsg(ctx, u32(s[0]), u32(s[1]), u32(s[2]))
	}},
	hfNowMs: {abi.FuncNowMs, nil, []byte{valI64}, func(i *Instance, _ context.Context, _ []uint64) int64 {
		return i.now()
	}},
	hfConfigGet: {abi.FuncConfigGet, i32s(2), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.configGet(u32(s[0]), u32(s[1]))
	}},
	hfFail: {abi.FuncFail, i32s(2), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.fail(u32(s[0]), u32(s[1]))
	}},
	// ABI 0.2.
	hfTimerSet: {abi.FuncTimerSet, append(i32s(5), valI64, valI32, valI32), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.timerSet(u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4]), int64(s[5]), u32(s[6]), u32(s[7]))
	}},
	hfTimerDelete: {abi.FuncTimerDelete, i32s(4), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.timerDelete(u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3]))
	}},
	hfWatermarkMs: {abi.FuncWatermarkMs, nil, []byte{valI64}, func(i *Instance, _ context.Context, _ []uint64) int64 {
		return i.watermark()
	}},
	hfStateKeys: {abi.FuncStateKeys, i32s(4), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.stateKeys(u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3]))
	}},
	hfHTTPRequest: {abi.FuncHTTPRequest, i32s(4), i32s(1), func(i *Instance, ctx context.Context, s []uint64) int64 {
		return i.httpRequest(ctx, u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3]))
	}},
	hfHTTPResponse: {abi.FuncHTTPResponse, i32s(2), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.httpResponse(u32(s[0]), u32(s[1]))
	}},
	// ABI 0.3.
	hfMetricDeclare: {abi.FuncMetricDeclare, i32s(5), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.metricDeclare(u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4]))
	}},
	hfMetricAdd: {abi.FuncMetricAdd, []byte{valI32, valI64}, i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.metricUpdate(u32(s[0]), int64(s[1]), false)
	}},
	hfMetricSet: {abi.FuncMetricSet, []byte{valI32, valI64}, i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.metricUpdate(u32(s[0]), int64(s[1]), true)
	}},
	hfMetricDeclareHistogram: {abi.FuncMetricDeclareHistogram, i32s(6), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.metricDeclareHistogram(u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3]), u32(s[4]), u32(s[5]))
	}},
	hfMetricObserve: {abi.FuncMetricObserve, []byte{valI32, valF64}, i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.metricObserve(u32(s[0]), math.Float64frombits(s[1]))
	}},
	// ABI 0.4.
	hfFailPermanent: {abi.FuncFailPermanent, i32s(2), i32s(1), func(i *Instance, _ context.Context, s []uint64) int64 {
		return i.failPermanent(u32(s[0]), u32(s[1]))
	}},
}

// hostFuncByName maps an ABI name to its description, for import checks.
var hostFuncByName = func() map[string]*hostFunc {
	m := make(map[string]*hostFunc, hfCount)
	for k := range hostFuncs {
		m[hostFuncs[k].name] = &hostFuncs[k]
	}
	return m
}()

func u32(v uint64) uint32 { return uint32(v) }

func sigOf(params, results []api.ValueType) funcType { return sig(params, results) }

// goFunc adapts a hostFunc to wazero's stack-based calling convention.
func (h *hostFunc) goFunc(id int) api.GoModuleFunc {
	fn, i64 := h.fn, len(h.results) == 1 && h.results[0] == valI64
	return func(ctx context.Context, _ api.Module, stack []uint64) {
		var r int64
		if i := instanceOf(ctx); i == nil {
			r = int64(abi.ErrNotAllowed) // not one of our calls: cannot happen
		} else {
			i.moved = 0
			r = fn(i, ctx, stack)
			i.chargeMoved()
			if i.observer != nil {
				i.observer(id, r)
			}
		}
		if i64 {
			stack[0] = uint64(r)
		} else {
			stack[0] = uint64(uint32(int32(r)))
		}
	}
}

// instantiateHostModule registers the wasmstream_v0 host module in rt.
func instantiateHostModule(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(abi.ModuleName)
	for id := range hostFuncs {
		h := &hostFuncs[id]
		b.NewFunctionBuilder().WithGoModuleFunction(h.goFunc(id), h.params, h.results).Export(h.name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// view returns guest memory [ptr, ptr+n) as a view, or false when n is negative as an i32 or the
// range is outside memory. n == 0 is an empty (nil) view whatever ptr is. The view is valid until
// the guest runs again. Its bytes, which the host reads, are charged to the call (fuel.go).
func (i *Instance) view(ptr, n uint32) ([]byte, bool) {
	b, ok := i.viewOut(ptr, n)
	i.moved += len(b)
	return b, ok
}

// viewOut is view for a buffer the host writes into: the bytes are charged when written.
func (i *Instance) viewOut(ptr, n uint32) ([]byte, bool) {
	switch {
	case int32(n) < 0:
		return nil, false
	case n == 0:
		return nil, true
	}
	return i.mem.Read(ptr, n) // checks uint64(ptr)+uint64(n) <= memory size
}

// stateScope checks that state functions are allowed and key is in scope.
func (i *Instance) stateScope(key []byte) (*scopeKey, abi.Errno) {
	if i.phase != phaseProcess || i.stateless {
		return nil, abi.ErrNotAllowed
	}
	sk := i.scope.find(key)
	if sk == nil {
		if !i.allKeys {
			return nil, abi.ErrKeyNotInBatch
		}
		if len(key) > i.lim.MaxKeyBytes {
			return nil, abi.ErrTooLarge
		}
		// A tick may use any key of its partition: the key joins the scope (a copy: key is a
		// view into guest memory).
		i.scope.add(append(make([]byte, 0, len(key)), key...))
		sk = i.scope.find(key)
	}
	return sk, abi.OK
}

// envFailed records a host storage error: the guest gets ERR_INTERNAL and the call fails.
func (i *Instance) envFailed(err error) int64 {
	if i.envErr == nil {
		i.envErr = err
	}
	return int64(abi.ErrInternal)
}

// copyOut implements the "length, copied when it fits" result of state_get and config_get.
func (i *Instance) copyOut(buf, val []byte) int64 {
	if len(val) > math.MaxInt32 {
		return int64(abi.ErrInternal)
	}
	if len(val) <= len(buf) {
		copy(buf, val)
		i.moved += len(val)
	}
	return int64(len(val))
}

// stateGet implements state_get (ABI §4.1).
func (i *Instance) stateGet(keyPtr, keyLen, namePtr, nameLen, bufPtr, bufCap uint32) int64 {
	key, ok1 := i.view(keyPtr, keyLen)
	name, ok2 := i.view(namePtr, nameLen)
	buf, ok3 := i.viewOut(bufPtr, bufCap)
	if !ok1 || !ok2 || !ok3 {
		return int64(abi.ErrOutOfBounds)
	}
	sk, e := i.stateScope(key)
	if e != abi.OK {
		return int64(e)
	}
	if len(key)+len(name) > store.StateKeyRoom(i.task) {
		return int64(abi.ErrTooLarge) // no such entry can exist
	}
	if idx, ok := i.written(sk, name); ok {
		w := &i.writes[idx]
		if w.Delete {
			return int64(abi.ErrNotFound)
		}
		return i.copyOut(buf, w.Value)
	}
	if i.env == nil {
		return int64(abi.ErrNotFound)
	}
	val, found, err := i.env.StateGet(sk.key, name)
	if err != nil {
		return i.envFailed(err)
	}
	if !found {
		return int64(abi.ErrNotFound)
	}
	return i.copyOut(buf, val)
}

// statePut implements state_put (ABI §4.2) and, with del, state_delete (§4.3).
func (i *Instance) statePut(keyPtr, keyLen, namePtr, nameLen, valPtr, valLen uint32, del bool) int64 {
	key, ok1 := i.view(keyPtr, keyLen)
	name, ok2 := i.view(namePtr, nameLen)
	val, ok3 := i.view(valPtr, valLen)
	if !ok1 || !ok2 || !ok3 {
		return int64(abi.ErrOutOfBounds)
	}
	sk, e := i.stateScope(key)
	if e != abi.OK {
		return int64(e)
	}
	if len(key)+len(name) > store.StateKeyRoom(i.task) {
		return int64(i.chargeState(sk, name, len(val), false, 0)) // fails the call
	}
	if len(name) > i.lim.MaxNameBytes || len(val) > i.lim.MaxValueBytes {
		return int64(abi.ErrTooLarge)
	}
	if len(i.writes)+len(i.timers) >= i.lim.MaxWritesPerCall {
		return int64(abi.ErrLimit)
	}
	replaced := 0
	if idx, ok := i.written(sk, name); ok {
		_, replaced = store.StateWriteCost(i.task, key, name, len(i.writes[idx].Value))
	}
	if e := i.chargeState(sk, name, len(val), false, replaced); e != abi.OK {
		return int64(e)
	}
	if del {
		val = nil
	}
	// One allocation holds the write's name and value, and the key's copy on its first write.
	n := len(name) + len(val)
	if sk.owned == nil {
		n += len(sk.key)
	}
	// Not carved from a shared block like outputs: the state cache keeps name and value for as
	// long as the key is cached, which would keep a whole block alive for each.
	b := make([]byte, n)
	if sk.owned == nil {
		k := copy(b, sk.key)
		sk.owned, b = b[:k:k], b[k:]
	}
	copy(b, name)
	copy(b[len(name):], val)
	w := Write{Key: sk.owned, Name: b[:len(name):len(name)], Delete: del}
	if !del {
		w.Value = b[len(name):]
	}
	i.addWrite(sk, w)
	return int64(abi.OK)
}

// written returns the index in i.writes of the latest write of name to sk in this call.
func (i *Instance) written(sk *scopeKey, name []byte) (int32, bool) {
	if sk.names != nil {
		idx, ok := sk.names[string(name)]
		return idx, ok
	}
	for j := sk.last; j > 0; j = i.prevWrite[j-1] {
		if bytes.Equal(i.writes[j-1].Name, name) {
			return j - 1, true
		}
	}
	return 0, false
}

// addWrite appends w, a write to sk, to the call's overlay. A key's first scopeLinear writes are
// only chained (no map per key: most keys of a batch are written once or twice); past that the
// key's names get an index.
func (i *Instance) addWrite(sk *scopeKey, w Write) {
	if i.writes == nil {
		i.writes = make([]Write, 0, sizeHint(i.writesHint))
	}
	idx := int32(len(i.writes))
	i.writes = append(i.writes, w)
	i.prevWrite = append(i.prevWrite, sk.last)
	sk.last = idx + 1
	sk.writes++
	switch {
	case sk.names != nil:
		sk.names[keyString(w.Name)] = idx // keyed by the write's own copy: no allocation
	case sk.writes > scopeLinear:
		sk.names = make(map[string]int32, 2*scopeLinear)
		for j := sk.last; j > 0; j = i.prevWrite[j-1] {
			if n := keyString(i.writes[j-1].Name); !mapHas(sk.names, n) {
				sk.names[n] = j - 1 // the latest write of the name comes first in the chain
			}
		}
	}
}

func mapHas(m map[string]int32, k string) bool { _, ok := m[k]; return ok }

// latestWrites appends to dst the index in i.writes of the latest write of each name sk wrote in
// this call, in no particular order.
func (i *Instance) latestWrites(sk *scopeKey, dst []int32) []int32 {
	if sk.names != nil {
		for _, idx := range sk.names {
			dst = append(dst, idx)
		}
		return dst
	}
	start := len(dst)
chain:
	for j := sk.last; j > 0; j = i.prevWrite[j-1] {
		for _, seen := range dst[start:] {
			if bytes.Equal(i.writes[seen].Name, i.writes[j-1].Name) {
				continue chain // a later write of the name is listed already
			}
		}
		dst = append(dst, j-1)
	}
	return dst
}

// stateScan implements state_scan (ABI §4.4): a ScanPage of the names of state[key] with the prefix
// after after, merging the committed state (Env.StateScan) with this call's overlay.
func (i *Instance) stateScan(keyPtr, keyLen, prefixPtr, prefixLen, afterPtr, afterLen, bufPtr, bufCap uint32) int64 {
	key, ok1 := i.view(keyPtr, keyLen)
	prefix, ok2 := i.view(prefixPtr, prefixLen)
	fromStart := int32(afterLen) == -1
	var after []byte
	ok3 := true
	if !fromStart {
		after, ok3 = i.view(afterPtr, afterLen)
	}
	buf, ok4 := i.viewOut(bufPtr, bufCap)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return int64(abi.ErrOutOfBounds)
	}
	sk, e := i.stateScope(key)
	if e != abi.OK {
		return int64(e)
	}
	if len(buf) < 8 {
		return int64(abi.ErrBufferTooSmall)
	}

	ov := i.overlayInRange(sk, prefix, after, fromStart)
	p := scanPage{buf: buf, off: 8}
	oi := 0
	// putOverlay adds the overlay entry ov[oi] (unless it is a deletion) and advances oi.
	putOverlay := func() bool {
		w := &i.writes[ov[oi]]
		oi++
		if w.Delete {
			return true
		}
		return p.add(w.Name, w.Value)
	}
	if i.env != nil {
		err := i.env.StateScan(sk.key, prefix, after, fromStart, func(name, val []byte) bool {
			for oi < len(ov) && string(i.writes[ov[oi]].Name) < string(name) {
				if !putOverlay() {
					return false
				}
			}
			if oi < len(ov) && string(i.writes[ov[oi]].Name) == string(name) {
				return putOverlay() // the overlay replaces or hides the committed entry
			}
			return p.add(name, val)
		})
		if err != nil {
			clear(ov)
			return i.envFailed(err)
		}
	}
	for !p.full && oi < len(ov) {
		putOverlay()
	}
	clear(ov)
	if p.full && p.count == 0 {
		return int64(abi.ErrBufferTooSmall)
	}
	p.header()
	i.moved += p.off
	return int64(p.off)
}

// overlayInRange returns the indexes in writes of this call's latest writes to the names of
// state[sk] with prefix, after after unless fromStart, sorted by name. The slice is i.scanTmp's
// array: the caller clears it when done.
func (i *Instance) overlayInRange(sk *scopeKey, prefix, after []byte, fromStart bool) []int32 {
	ov := i.latestWrites(sk, i.scanTmp[:0])
	ov = slices.DeleteFunc(ov, func(idx int32) bool {
		name := i.writes[idx].Name
		return !bytes.HasPrefix(name, prefix) || (!fromStart && string(name) <= string(after))
	})
	slices.SortFunc(ov, func(a, b int32) int { return bytes.Compare(i.writes[a].Name, i.writes[b].Name) })
	i.scanTmp = ov[:0]
	return ov
}

// scanPage fills a ScanPage's entries in guest memory from offset 8; the header is written last.
type scanPage struct {
	buf   []byte
	off   int
	count uint32
	full  bool // an entry did not fit: more entries follow
}

func (p *scanPage) add(name, val []byte) bool {
	n := 8 + len(name) + len(val)
	if n > len(p.buf)-p.off {
		p.full = true
		return false
	}
	b := p.buf[p.off:]
	putU32(b, uint32(len(name)))
	copy(b[4:], name)
	putU32(b[4+len(name):], uint32(len(val)))
	copy(b[8+len(name):], val)
	p.off += n
	p.count++
	return true
}

// header writes the page's header: the entry count, and 1 when more entries follow.
func (p *scanPage) header() {
	putU32(p.buf[0:], p.count)
	more := uint32(0)
	if p.full {
		more = 1
	}
	putU32(p.buf[4:], more)
}

func putU32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// emit implements emit (ABI §4.5).
func (i *Instance) emit(outPtr, outLen, keyPtr, keyLen, valPtr, valLen, hdrPtr, hdrLen uint32, ts int64) int64 {
	out, ok1 := i.view(outPtr, outLen)
	key, ok2 := i.view(keyPtr, keyLen)
	// A null value (a tombstone) is val_len -1 from a guest that declares 0.5 (val_ptr is then
	// ignored); from an older guest it is a negative length like any other: ERR_OUT_OF_BOUNDS.
	null := int32(valLen) == abi.EmitNullValue && i.abiVers&0xffff >= 5
	val, ok3 := []byte(nil), true
	if !null {
		val, ok3 = i.view(valPtr, valLen)
	}
	hdr, ok4 := i.view(hdrPtr, hdrLen)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return int64(abi.ErrOutOfBounds)
	}
	if i.phase != phaseProcess {
		return int64(abi.ErrNotAllowed)
	}
	if len(i.outs) >= i.lim.MaxOutputsPerCall {
		return int64(abi.ErrLimit)
	}
	if len(out) > i.lim.MaxNameBytes || len(key) > i.lim.MaxKeyBytes ||
		len(val) > i.lim.MaxValueBytes || len(hdr) > i.lim.MaxValueBytes {
		return int64(abi.ErrTooLarge)
	}
	hs, err := abi.DecodeHeaders(hdr)
	if err != nil {
		return int64(abi.ErrInvalid)
	}
	if i.overRecordLimit(out, key, val, hs) {
		return int64(abi.ErrTooLarge)
	}
	if e := i.chargeEmit(len(key) + len(val) + len(hdr)); e != abi.OK {
		return int64(e)
	}
	name, ok := i.outputName(out)
	if !ok {
		return int64(abi.ErrInvalid)
	}
	o := i.copyOutput(name, key, val, hs)
	if null {
		o.Value, o.ValueNull = nil, true
	}
	o.Timestamp = ts
	if ts < 0 {
		o.Timestamp = i.now()
	}
	if i.outs == nil {
		i.outs = make([]Output, 0, sizeHint(i.outsHint))
	}
	i.outs = append(i.outs, o)
	return int64(abi.OK)
}

// overRecordLimit reports whether a record of key, val and headers hs would be larger than
// Limits.MaxRecordBytes, or than what output out takes (InstanceConfig.RecordLimit), counted as
// the Kafka output counts it.
func (i *Instance) overRecordLimit(out, key, val []byte, hs []abi.Header) bool {
	max := i.lim.MaxRecordBytes
	if i.recLimit != nil {
		if m := i.recLimit(out); m > 0 && (max <= 0 || m < max) {
			max = m
		}
	}
	if max <= 0 {
		return false
	}
	size := RecordOverheadBytes + len(key) + len(val)
	for _, h := range hs {
		size += HeaderOverheadBytes + len(h.Name) + len(h.Value)
	}
	return size > max
}

// outputName returns the output named out (a view into guest memory) as a string the Output may
// keep: one of InstanceConfig.Outputs, or an interned copy when any name goes. It returns false
// for a name not in Outputs.
func (i *Instance) outputName(out []byte) (string, bool) {
	if len(i.outputs) == 0 {
		return i.internName(out), true
	}
	k := slices.IndexFunc(i.outputs, func(s string) bool { return s == string(out) })
	if k < 0 {
		return "", false
	}
	return i.outputs[k], true // no allocation
}

// copyOutput returns the Output of name with copies of key, val and the headers hs (views into
// guest memory; hs itself is reused), carved from one allocation.
func (i *Instance) copyOutput(name string, key, val []byte, hs []abi.Header) Output {
	size := len(key) + len(val)
	for _, h := range hs {
		size += len(h.Name) + len(h.Value)
	}
	b := i.carve(size)[:0]
	take := func(p []byte) []byte {
		s := len(b)
		b = append(b, p...)
		return b[s:len(b):len(b)]
	}
	o := Output{Name: name, Key: take(key), Value: take(val)}
	for k := range hs {
		hs[k] = abi.Header{Name: take(hs[k].Name), Value: take(hs[k].Value)}
	}
	o.Headers = hs
	return o
}

// Output copies of at most slabMax bytes are carved from blocks of slabSize (Instance.slab).
const (
	slabSize = 16 << 10
	slabMax  = 1 << 10
)

// carve returns n bytes the caller owns: for a small n a piece of the instance's current block,
// which later copies never overlap, so that a batch's many small outputs share a few allocations
// instead of one each. Only for copies that are dropped soon (outputs, once produced).
func (i *Instance) carve(n int) []byte {
	if n > slabMax {
		return make([]byte, n)
	}
	if i.slab == nil || cap(i.slab)-len(i.slab) < n { // never nil, even for n == 0: an empty value is not a missing one
		i.slab = make([]byte, 0, slabSize)
	}
	l := len(i.slab)
	i.slab = i.slab[:l+n]
	return i.slab[l : l+n : l+n]
}

// maxInterned and maxInternedLen bound the output names an Instance remembers, so a guest emitting
// to ever new (or huge) names cannot make it hold much memory.
const (
	maxInterned    = 64
	maxInternedLen = 256
)

// internName returns out as a string, allocating only the first time a name is seen.
func (i *Instance) internName(out []byte) string {
	if s, ok := i.interned[string(out)]; ok {
		return s
	}
	s := string(out)
	if len(i.interned) < maxInterned && len(s) <= maxInternedLen {
		if i.interned == nil {
			i.interned = make(map[string]string)
		}
		i.interned[s] = s
	}
	return s
}

// sizeHint is the initial capacity of a call's writes or outputs: the previous call's count, within
// reason, so a steady workload does not regrow the slices every call.
func sizeHint(last int) int { return min(max(last, 4), 1024) }

// logMsg implements log (ABI §4.6).
func (i *Instance) logMsg(ctx context.Context, level, msgPtr, msgLen uint32) int64 {
	msg, ok := i.view(msgPtr, msgLen)
	if !ok {
		return int64(abi.ErrOutOfBounds)
	}
	var lvl slog.Level
	switch level {
	case abi.LevelDebug:
		lvl = slog.LevelDebug
	case abi.LevelInfo:
		lvl = slog.LevelInfo
	case abi.LevelWarn:
		lvl = slog.LevelWarn
	case abi.LevelError:
		lvl = slog.LevelError
	default:
		return int64(abi.ErrInvalid)
	}
	if i.log.Enabled(ctx, lvl) && i.logLim.allow(i.log) {
		i.log.LogAttrs(ctx, lvl, string(truncate(msg, i.lim.MaxLogBytes)), i.logAttrs...)
	}
	return int64(abi.OK)
}

// configGet implements config_get (ABI §4.8).
func (i *Instance) configGet(bufPtr, bufCap uint32) int64 {
	buf, ok := i.viewOut(bufPtr, bufCap)
	if !ok {
		return int64(abi.ErrOutOfBounds)
	}
	return i.copyOut(buf, i.config)
}

// fail implements fail (ABI §4.9): the last message of a call wins.
func (i *Instance) fail(msgPtr, msgLen uint32) int64 {
	msg, ok := i.view(msgPtr, msgLen)
	if !ok {
		return int64(abi.ErrOutOfBounds)
	}
	i.failMsg = string(truncate(msg, i.lim.MaxLogBytes))
	return int64(abi.OK)
}

// failPermanent implements fail_permanent (ABI §4.22): fail's message, and the call fails
// permanently whatever it returns (callPayload).
func (i *Instance) failPermanent(msgPtr, msgLen uint32) int64 {
	if rc := i.fail(msgPtr, msgLen); rc != int64(abi.OK) {
		return rc
	}
	i.permanent = true
	return int64(abi.OK)
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
