package modrt

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/fuel"
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

// elemModule assembles a module of one () -> () function and a table of 1 element, with a
// passive element segment of n references to the function, and an active one of m.
func elemModule(n, m int) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, 1, 4, 1, 0x60, 0, 0)                            // one type: () -> ()
	b = append(b, 3, 2, 1, 0)                                     // one function
	b = append(b, 4, 4, 1, 0x70, 0, 1)                            // one funcref table of 1 element
	seg := append([]byte{2, 1, 0}, appendULEB(nil, uint64(n))...) // passive, elemkind funcref
	seg = append(seg, bytes.Repeat([]byte{0}, n)...)
	seg = append(append(seg, 0, 0x41, 0, 0x0b), appendULEB(nil, uint64(m))...) // active at 0
	seg = append(seg, bytes.Repeat([]byte{0}, m)...)
	b = append(append(append(b, 9), appendULEB(nil, uint64(len(seg)))...), seg...)
	return append(b, 10, 4, 1, 2, 0, 0x0b)
}

// shapeModule assembles a module of one () -> () function, which it exports under exports
// names, and imports functions of that type imports times (env.f).
func shapeModule(imports, exports int) []byte {
	section := func(b []byte, id byte, n int, entries []byte) []byte {
		body := append(appendULEB(nil, uint64(n)), entries...)
		return append(append(append(b, id), appendULEB(nil, uint64(len(body)))...), body...)
	}
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = section(b, 1, 1, []byte{0x60, 0, 0})
	b = section(b, 2, imports, bytes.Repeat([]byte{3, 'e', 'n', 'v', 1, 'f', 0, 0}, imports))
	b = section(b, 3, 1, []byte{0})
	var ex []byte
	for k := range exports {
		name := fmt.Sprint("e", k)
		ex = append(append(appendULEB(ex, uint64(len(name))), name...), 0)
		ex = appendULEB(ex, uint64(imports))
	}
	b = section(b, 7, exports, ex)
	return section(b, 10, 1, []byte{2, 0, 0x0b})
}

// brTable returns a block holding a br_table of n entries and its default, all to the block.
func brTable(n int) []byte {
	b := appendULEB([]byte{0x02, 0x40, 0x41, 0, 0x0e}, uint64(n))
	return append(append(b, bytes.Repeat([]byte{0}, n+1)...), 0x0b)
}

// Issue s10: the block work is the sum over the functions of the square of their blocks: each
// block, loop, if, else, br, br_if and return counts one, a br_table one plus one per 8 of its
// entries.
func TestDeclarationsBlockWork(t *testing.T) {
	if d, err := fuel.Declarations(elemModule(3, 1)); err != nil || d.ElemEntries != 4 {
		t.Errorf("element segments of 3 and 1: %d elements, %v; want 4", d.ElemEntries, err)
	}
	// 7 blocks: block: br_if 0 three times, br_table [0 0 1] default 0; then if: return.
	body := []byte{0x02, 0x40}
	body = append(body, bytes.Repeat([]byte{0x41, 0, 0x0d, 0}, 3)...)
	body = append(body, 0x41, 0, 0x0e, 3, 0, 0, 1, 0, 0x0b)
	body = append(body, 0x41, 0, 0x04, 0x40, 0x0f, 0x0b)
	// 1 + 1 + 32/8 blocks: a block with a br_table of 32 entries.
	d, err := fuel.Declarations(bombModule([][]byte{body, brTable(32)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if d.BlockWork != 7*7+6*6 || d.MaxBlocks != 7 {
		t.Errorf("block work %d, most blocks in one function %d; want %d and 7", d.BlockWork, d.MaxBlocks, 7*7+6*6)
	}
	r := newRuntime(t, RuntimeConfig{})
	if _, err := r.Compile(ctx, fixture(t, "spin"), Limits{MaxBlockWork: 7 * 7}); err != nil {
		t.Errorf("spin (7 blocks) under max_block_work 49: %v", err)
	}
	_, err = r.Compile(ctx, fixture(t, "spin"), Limits{MaxBlockWork: 48})
	if want := "has a block work (every function's blocks and branches, squared and summed; 7 in one function) of 49, over the limit of 48 (max_block_work)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("spin under max_block_work 48: %v; want %q", err, want)
	}
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
		// Issue s10: one function of many blocks. 50,000 br_if, 200 KB, took 118 s to compile,
		// 20,000 blocks of one br_if each 14 s, a br_table of 200,000 entries, 195 KB, 19 s and
		// 540 MB.
		{"50,000 br_if", "has a block work (every function's blocks and branches, squared and summed; 50001 in one function) of 2500100001, over the limit of 200000000 (max_block_work)",
			bombModule([][]byte{append(append([]byte{0x02, 0x40}, bytes.Repeat([]byte{0x41, 0, 0x0d, 0}, 50_000)...), 0x0b)}, nil)},
		{"20,000 blocks of a br_if", "has a block work (every function's blocks and branches, squared and summed; 40000 in one function) of 1600000000, over the limit of 200000000 (max_block_work)",
			bombModule([][]byte{bytes.Repeat([]byte{0x02, 0x40, 0x41, 0, 0x0d, 0, 0x0b}, 20_000)}, nil)},
		// Issue s10: element segments are held in every instance: one of 10^7 elements, 10 MB,
		// took 16 s and 1.2 GB to compile and 4.8 s to instantiate.
		{"an element segment of 10,000,000 elements", "has element segments of 10000001 elements together, over the limit of 100000 (max_table_elements)",
			elemModule(10_000_000, 1)},
		// Issue s10: one function of 2·10^7 instructions, 58 MB, took 66 s and 3.6 GB to
		// compile (the same code in 100 functions a fifth of the time).
		{"a function of 1 MiB", "has a function of 1048578 bytes, over the limit of 1048576 (max_function_bytes)",
			bombModule([][]byte{bytes.Repeat([]byte{0x01}, 1<<20)}, nil)},
		// Issue s10: 3·10^6 exports, 31 MB, took 7.9 s and 1 GB to compile and 0.2 s per
		// instance; imports cost likewise, and each unknown one was a line of the error.
		{"10,001 exports", "has 10001 exports, over the limit of 10000",
			shapeModule(0, 10_001)},
		{"10,001 imports", "has 10001 imports, over the limit of 10000",
			shapeModule(10_001, 1)},
		{"a br_table of 200,000 entries", "has a block work (every function's blocks and branches, squared and summed; 25002 in one function) of 625100004, over the limit of 200000000 (max_block_work)",
			bombModule([][]byte{brTable(200_000)}, nil)},
	} {
		start := time.Now()
		_, err := r.Compile(ctx, tc.wasm, Limits{})
		took := time.Since(start)
		var me *ModuleError
		if !errors.As(err, &me) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a *ModuleError saying %q", tc.name, err, tc.want)
			continue
		}
		// The message is checkDeclared's, which Compile runs before wazero sees the module: the
		// refusal costs one pass over the bytes, not a compile. The time is logged, not
		// asserted (CI once took 18 s for the 10 MB segment under -race on a loaded machine).
		t.Logf("%s (%d KB): refused in %v", tc.name, len(tc.wasm)>>10, took.Round(time.Millisecond))
	}
}
