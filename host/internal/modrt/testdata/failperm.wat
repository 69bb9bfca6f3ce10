;; failperm: a 0.4 guest whose process calls fail_permanent("bad record") and then returns the
;; first byte of the record's value minus '0' (Batch layout, §6.2: the first record's value at
;; 0x2000 + 8 + 4 + 4 + 8 + 8 + 4 + len(source) + 4 + len(key) + 4); the tests use a one-byte
;; source and key, so the value's first byte is at 0x2000 + 46. A value of "0" fails permanently with a
;; return of 0, "1" with a return of 1; "f" calls fail_permanent with a bad pointer first
;; (ERR_OUT_OF_BOUNDS: nothing recorded) and returns 1: an ordinary failure.
(module
  (import "wasmstream_v0" "fail_permanent" (func $fp (param i32 i32) (result i32)))
  (import "wasmstream_v0" "fail" (func $fail (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "bad record")
  (func (export "wasmstream_abi_version") (result i32) (i32.const 4))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 0x2000))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32)
    (local $v i32)
    (local.set $v (i32.load8_u (i32.const 0x202e)))
    (if (i32.eq (local.get $v) (i32.const 0x66))
      (then
        (drop (call $fail (i32.const 16) (i32.const 10)))
        (drop (call $fp (i32.const 0x7ffffff0) (i32.const 100)))
        (return (i32.const 1))))
    (drop (call $fp (i32.const 16) (i32.const 10)))
    (i32.sub (local.get $v) (i32.const 0x30)))
)
