;; start: a start function that counts its runs in a global, which wasmstream_process emits (as a
;; little-endian i32) to output "starts": it must run exactly once per instance, before anything.
(module
  (import "wasmstream_v0" "emit" (func $emit (param i32 i32 i32 i32 i32 i32 i32 i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "starts")
  (global $runs (mut i32) (i32.const 0))
  (func $start (global.set $runs (i32.add (global.get $runs) (i32.const 1))))
  (start $start)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32)
    (i32.store (i32.const 32) (global.get $runs))
    (drop (call $emit (i32.const 16) (i32.const 6) (i32.const 0) (i32.const 0)
                      (i32.const 32) (i32.const 4) (i32.const 0) (i32.const 0) (i64.const -1)))
    (i32.const 0))
)
