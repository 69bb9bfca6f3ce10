package modrt

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

// fuzzProgram turns arbitrary bytes into a driver program that calls host functions only (ids
// 0-8) with arbitrary arguments: each op takes an id byte, a relmask byte and its arguments from
// data, zero-filled when data runs out.
func fuzzProgram(data []byte) []byte {
	var p []byte
	next := func(n int) []byte {
		b := make([]byte, n)
		copy(b, data)
		data = data[min(n, len(data)):]
		return b
	}
	for len(data) > 0 && len(p) < 4096 {
		h := next(2)
		id := h[0] % (opFail + 1) // the 0.1 driver's host-function ops; 0.2 ones: FuzzTimerHostFunctions
		p = append(p, id, h[1])
		p = append(p, next(4*opArgs[id])...)
		if id == opEmit {
			p = append(p, next(8)...)
		}
	}
	return p
}

// FuzzHostFunctions drives every host function through a real instance with arbitrary pointers,
// lengths and values, and checks that the host neither panics nor returns an undocumented code.
func FuzzHostFunctions(f *testing.F) {
	le := func(vs ...int32) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
		return b
	}
	f.Add(append([]byte{opStatePut, 0x3f}, le(0, 1, 0, 1, 0, 1)...))
	f.Add(append([]byte{opStateGet, 0}, le(-1, 16, 65530, 16, 0x7fffffff, 1)...))
	f.Add(append([]byte{opStateScan, 0xff}, le(0, 1, 0, 0, 0, -1, 0, 0)...))
	f.Add(append(append([]byte{opEmit, 0x55}, le(0, 3, 0, 1, 0, 2, 0, 4)...), le(-1, -1)...))
	f.Add(append([]byte{opLog, 0}, le(7, 0, 100)...))
	f.Add(append([]byte{opConfigGet, 0}, le(-16, 32)...))
	f.Add(append([]byte{opFail, 2}, le(0x8000, 0x7fffffff)...))
	// A name that cannot fit beside its key in the store (ABI.md §10): ERR_TOO_LARGE, which CI's
	// fuzzing once found when the codes were a table here that had missed it.
	// The key "k" is read from the op's own last argument (buf_cap 'k', at offset 22 of the
	// program), as fuzzProgram keeps no data after the ops.
	f.Add(append([]byte{opStateGet, 1}, le(22, 1, 0, 65000, scratch, 'k')...))
	f.Add(new(prog).put("k", "a", "1").get("k", "a", scratch, 8).scan("k", "", nil, scratch, 64).
		emit("o", "k", "v", abi.AppendHeaders(nil, []abi.Header{{Name: []byte("h")}}), -1).bytes())

	r := newRuntime(f, RuntimeConfig{})
	m := compile(f, r, "driver", Limits{MaxMemoryPages: 4, MaxValueBytes: 64, MaxNameBytes: 16,
		MaxKeyBytes: 16, MaxWritesPerCall: 8, MaxOutputsPerCall: 8, MaxLogBytes: 32})
	env := newEnv(map[string]map[string]string{"k": {"a": "1", "b": "22", "": "e"}})
	allowed := allowedErrors(f)
	var inst *Instance
	var bad []hostResult
	observer := func(fn int, r int64) {
		if r >= 0 || fn == hfNowMs {
			return
		}
		for _, e := range allowed[fn] {
			if abi.Errno(r) == e {
				return
			}
		}
		bad = append(bad, hostResult{fn, r})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if inst == nil || inst.Broken() {
			if inst != nil {
				_ = inst.Close(ctx)
			}
			var err error
			if inst, err = m.Instantiate(ctx, InstanceConfig{Task: "fuzz"}); err != nil {
				t.Fatal(err)
			}
			inst.observer = observer
		}
		bad = bad[:0]
		prog := fuzzProgram(data)
		// One record only: the program may overwrite the rest of the batch in guest memory, and
		// a clobbered header count can keep the driver walking for seconds (there is no CPU
		// bound yet).
		recs := []abi.Record{rec("k", prog)}
		_, err := inst.Process(ctx, recs, env)
		if err != nil {
			// The program may overwrite itself (host functions write into guest memory) and
			// reach the driver's return or trap op; anything else is a bug.
			var ce *CallError
			if !errors.As(err, &ce) || !(ce.Trap || errors.Is(err, ErrGuestFailed) || errors.Is(err, ErrOverLimit)) {
				t.Fatalf("process: %v", err)
			}
		}
		if len(bad) > 0 {
			t.Fatalf("undocumented results: %v", bad)
		}
	})
}
