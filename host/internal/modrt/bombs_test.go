package modrt

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// bombModule assembles a module of type () -> () functions: bodies[k] is the code of function k
// (without its end), locals[k] how many i32 locals it declares.
func bombModule(bodies [][]byte, locals []uint32) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, 1, 4, 1, 0x60, 0, 0) // one type: () -> ()
	fs := appendULEB(nil, uint64(len(bodies)))
	fs = append(fs, bytes.Repeat([]byte{0}, len(bodies))...)
	b = append(append(append(b, 3), appendULEB(nil, uint64(len(fs)))...), fs...)
	code := appendULEB(nil, uint64(len(bodies)))
	for k, body := range bodies {
		var fn []byte
		if locals != nil && locals[k] > 0 {
			fn = append(appendULEB([]byte{1}, uint64(locals[k])), 0x7f)
		} else {
			fn = []byte{0}
		}
		fn = append(append(fn, body...), 0x0b)
		code = append(append(code, appendULEB(nil, uint64(len(fn)))...), fn...)
	}
	return append(append(append(b, 10), appendULEB(nil, uint64(len(code)))...), code...)
}

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// nest returns n nested structures of opcode op (block 0x02, loop 0x03) with empty bodies.
func nest(op byte, n int) []byte {
	return append(bytes.Repeat([]byte{op, 0x40}, n), bytes.Repeat([]byte{0x0b}, n)...)
}

// Issue 22 item 4: compile bombs are refused before anything is compiled, quickly, each with a
// message naming the limit (before, 10,000 nested loops in 30 KB took 49.5 s to load, 3 MB of
// nested blocks over 300 s and 2 GB, 2000 functions of 50,000 locals 799 MB).
func TestCompileBombsRefused(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	many := func(n int, body []byte) [][]byte {
		bodies := make([][]byte, n)
		for k := range bodies {
			bodies[k] = body
		}
		return bodies
	}
	locals := make([]uint32, 2000)
	for k := range locals {
		locals[k] = 50_000
	}
	for _, tc := range []struct {
		name, want string
		wasm       []byte
	}{
		{"10,000 nested loops", "nests loops 10000 deep, over the limit of 100 (max_loop_depth)",
			bombModule([][]byte{nest(0x03, 10_000)}, nil)},
		{"20,000 nested blocks", "nests blocks 20000 deep, over the limit of 10000 (max_nesting_depth)",
			bombModule([][]byte{nest(0x02, 20_000)}, nil)},
		{"100 functions of 9,000 nested blocks", "has a nesting work (every instruction's nesting depth, summed) of 8100000000, over the limit of 400000000 (max_nesting_work)",
			bombModule(many(100, nest(0x02, 9_000)), nil)},
		{"2000 functions of 50,000 locals", "declares 100000000 locals (50000 in one function), over the limit of 1000000 (max_locals)",
			bombModule(many(2000, nil), locals)},
		{"100,001 functions", "defines 100001 functions, over the limit of 100000 (max_functions)",
			bombModule(many(100_001, nil), nil)},
	} {
		start := time.Now()
		_, err := r.Compile(ctx, tc.wasm, Limits{})
		took := time.Since(start)
		var me *ModuleError
		if !errors.As(err, &me) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a *ModuleError saying %q", tc.name, err, tc.want)
			continue
		}
		t.Logf("%s (%d KB): refused in %v", tc.name, len(tc.wasm)>>10, took.Round(time.Millisecond))
		if took > 10*time.Second {
			t.Errorf("%s: refused only after %v", tc.name, took)
		}
	}
}
