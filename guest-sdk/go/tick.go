package wasmstream

import (
	"errors"
	"strconv"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"
)

// Tick is the periodic partition callback, handed to the handler registered with HandleTick.
// During a tick every key of the partition is in scope: StateOf, SetTimer and DeleteTimer accept
// any key, for example the keys Keys lists.
type Tick struct {
	t abi.Tick
}

// Partition returns the tick's partition.
func (t *Tick) Partition() uint32 { return t.t.Partition }

// Now returns the processing time of the tick in ms since the epoch.
func (t *Tick) Now() int64 { return t.t.Now }

// Watermark returns the partition's watermark in ms since the epoch, or -1 (see Watermark).
func (t *Tick) Watermark() int64 { return t.t.Watermark }

// Source returns the input name: the file input name or the Kafka topic (a copy).
func (t *Tick) Source() string { return string(t.t.Source) }

// Reusable buffers of Keys, like the scan buffers of State.Scan.
var (
	keysBuf   []byte
	keysAfter []byte
	keysPage  [][]byte
	listing   bool
)

const keysBufInitial = 4 << 10

// Keys calls fn for every key of the partition that has state, in bytewise ascending order, until
// fn returns false. key is a view valid only during that call of fn; a State made from it with
// StateOf must not be kept past it either. fn may read and write state and timers of any key and
// may call Keys again. Keys works only while the tick handler runs (otherwise ErrNotAllowed).
//
// Keys fetches the keys page by page (state_keys with the last key as "after"), growing its buffer
// when a single key does not fit, up to 64 MiB.
func (t *Tick) Keys(fn func(key []byte) bool) error {
	buf, keys, after := keysBuf, keysPage, keysAfter
	if listing {
		// A nested Keys must not overwrite the page the outer one is iterating.
		buf, keys, after = nil, nil, nil
	} else {
		listing = true
		defer func() {
			keysBuf, keysPage, keysAfter = buf, keys, after
			listing = false
		}()
	}
	if len(buf) == 0 {
		buf = make([]byte, keysBufInitial)
	}
	fromFirst := true
	for {
		n := host.StateKeys(after, fromFirst, buf)
		if n == int32(abi.ErrBufferTooSmall) && len(buf) < scanBufMax {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err := check(abi.FuncStateKeys, n); err != nil {
			return err
		}
		if n > int32(len(buf)) {
			return errors.New("wasmstream: state_keys: page longer than the buffer")
		}
		var more bool
		var err error
		keys, more, err = abi.DecodeKeyPage(buf[:n], keys)
		if err != nil {
			return errors.New("wasmstream: state_keys: " + err.Error())
		}
		for _, k := range keys {
			if !fn(k) {
				return nil
			}
		}
		if !more {
			return nil
		}
		if len(keys) == 0 {
			return errors.New("wasmstream: state_keys: empty page with more = 1")
		}
		after = append(after[:0], keys[len(keys)-1]...)
		fromFirst = false
	}
}

var (
	tickFn func(t *Tick) error
	tick   Tick
)

// HandleTick registers fn as the tick handler: the host calls it every configured interval for
// each partition of the task, while no other call of that partition runs. Missed ticks coalesce
// into one. If fn returns an error or panics, the tick fails like a failed batch: none of its
// state writes, timer changes or outputs take effect. Without a handler a tick does nothing. A
// later call replaces fn.
func HandleTick(fn func(t *Tick) error) { tickFn = fn }

// callOnTick handles wasmstream_on_tick on the first n bytes of inBuf.
func callOnTick(n int32) int32 {
	if n < 0 || int(n) > len(inBuf) {
		return fail("wasmstream: tick payload is not in the buffer wasmstream_alloc returned")
	}
	t, err := abi.DecodeTick(inBuf[:n])
	if err != nil {
		return fail("wasmstream: tick: " + err.Error())
	}
	if tickFn == nil {
		return 0
	}
	tick.t = t
	err = tickFn(&tick)
	tick.t = abi.Tick{}
	if err != nil {
		return failErr("wasmstream: tick of "+string(t.Source)+"/"+
			strconv.FormatUint(uint64(t.Partition), 10)+": "+err.Error(), err)
	}
	return 0
}
