package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// bombModule returns a task module of ABI 0.1 (the exports of testdata/loop.wat, doing
// nothing) with one more function, of type () -> (), whose code (without its end) is body, and
// a passive element segment of elems references (none at 0) to a table of 1 element.
func bombModule(body []byte, elems int) []byte {
	uleb := func(b []byte, v uint64) []byte {
		for ; v >= 0x80; v >>= 7 {
			b = append(b, byte(v)|0x80)
		}
		return append(b, byte(v))
	}
	section := func(b []byte, id byte, body []byte) []byte {
		return append(uleb(append(b, id), uint64(len(body))), body...)
	}
	name := func(b []byte, s string) []byte { return append(uleb(b, uint64(len(s))), s...) }
	b := []byte("\x00asm\x01\x00\x00\x00")
	// Types: () -> i32, (i32) -> i32, (i32 i32) -> i32, () -> ().
	b = section(b, 1, []byte{4, 0x60, 0, 1, 0x7f, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 2, 0x7f, 0x7f, 1, 0x7f, 0x60, 0, 0})
	b = section(b, 3, []byte{5, 0, 1, 2, 2, 3})
	b = section(b, 4, []byte{1, 0x70, 0, 1})
	b = section(b, 5, []byte{1, 0, 1})
	ex := []byte{5}
	for k, n := range []string{"memory", "wasmstream_abi_version", "wasmstream_alloc", "wasmstream_init", "wasmstream_process"} {
		kind, idx := byte(0), k-1
		if k == 0 {
			kind, idx = 2, 0
		}
		ex = append(name(ex, n), kind, byte(idx))
	}
	b = section(b, 7, ex)
	if elems > 0 {
		seg := uleb([]byte{1, 1, 0}, uint64(elems)) // one passive segment of funcrefs
		b = section(b, 9, append(seg, bytes.Repeat([]byte{4}, elems)...))
	}
	code := []byte{5, 4, 0, 0x41, 1, 0x0b, 5, 0, 0x41, 0x80, 0x08, 0x0b, 4, 0, 0x41, 0, 0x0b, 4, 0, 0x41, 0, 0x0b}
	fn := append(append([]byte{0}, body...), 0x0b)
	code = append(uleb(code, uint64(len(fn))), fn...)
	return section(b, 10, code)
}

// Issue s10: modules that cost the compiler minutes or gigabytes for a few hundred kilobytes
// are refused by check (and so by run and deploy, which validate the same way) in a moment,
// each with a message naming its limit. Before, a function of 2·10^7 instructions (58 MB) took
// 66 s and 3.6 GB to compile, of 10^6 (3 MB) 0.8 s and 190 MB; one function of 20,000 blocks of a br_if each
// (136 KB) took 14 s to compile and one of 50,000 br_if 118 s; a passive element segment of
// 10^7 elements (10 MB) 16.5 s and 1.2 GB, and 4.8 s more for each instance. A module just
// under the limits is accepted.
func TestBinaryCompileBombsRefused(t *testing.T) {
	bin := guestbuild.Binary(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(input, []byte("{\"k\":\"a\",\"v\":\"1\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(name string, wasm []byte) (int, string) {
		module := filepath.Join(dir, name+".wasm")
		if err := os.WriteFile(module, wasm, 0o644); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+".yaml")
		cfg := fmt.Sprintf(`data_dir: %s
tasks:
  - name: bomb
    module: %s
    inputs: [{path: %s, key_field: k, value_field: v}]
    output: {type: file, path: %s}
`, filepath.Join(dir, "data-"+name), module, input, filepath.Join(dir, "out.ndjson"))
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runBinary(t, bin, nil, "check", "-c", path)
		return code, stderr
	}
	brIfs := func(n int) []byte {
		return append(append([]byte{0x02, 0x40}, bytes.Repeat([]byte{0x41, 0, 0x0d, 0}, n)...), 0x0b)
	}
	for _, tc := range []struct {
		name, want string
		wasm       []byte
	}{
		{"blocks", "has a block work (every function's blocks and branches, squared and summed; 40000 in one function) of 1600000000, over the limit of 200000000 (max_block_work)",
			bombModule(bytes.Repeat([]byte{0x02, 0x40, 0x41, 0, 0x0d, 0, 0x0b}, 20_000), 0)},
		{"brif", "has a block work (every function's blocks and branches, squared and summed; 50001 in one function) of 2500100001, over the limit of 200000000 (max_block_work)",
			bombModule(brIfs(50_000), 0)},
		{"bigfunc", "has a function of 3000002 bytes, over the limit of 1048576 (max_function_bytes)",
			bombModule(bytes.Repeat([]byte{0x41, 0, 0x1a}, 1_000_000), 0)},
		{"elems", "has element segments of 10000000 elements together, over the limit of 100000 (max_table_elements)",
			bombModule(nil, 10_000_000)},
	} {
		if code, stderr := check(tc.name, tc.wasm); code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("check of %s (%d KB): exit %d, stderr:\n%s\nwant a refusal saying %q", tc.name, len(tc.wasm)>>10, code, stderr, tc.want)
		}
	}
	// A function of 5,000 blocks and 100,000 elements: accepted.
	if code, stderr := check("under", bombModule(brIfs(5_000), 100_000)); code != 0 {
		t.Errorf("check of a module under the limits: exit %d, stderr:\n%s", code, stderr)
	}
}
