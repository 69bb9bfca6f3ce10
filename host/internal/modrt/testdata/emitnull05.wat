;; emitnull05: a 0.5 guest whose process emits to output "o" with key "k" a null value (val_len -1,
;; val_ptr 0: ABI 0.5, §4.5) and then an empty value (val_len 0), and returns the negated status
;; of the first emit that failed (0 when both succeeded): ERR_OUT_OF_BOUNDS (-2) returns 2.
(module
  (import "wasmstream_v0" "emit" (func $emit (param i32 i32 i32 i32 i32 i32 i32 i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "ok")
  (func (export "wasmstream_abi_version") (result i32) (i32.const 5))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 0x2000))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32)
    (local $r i32)
    (local.set $r (call $emit (i32.const 16) (i32.const 1) (i32.const 17) (i32.const 1)
      (i32.const 0) (i32.const -1) (i32.const 0) (i32.const 0) (i64.const 7)))
    (if (local.get $r) (then (return (i32.sub (i32.const 0) (local.get $r)))))
    (i32.sub (i32.const 0) (call $emit (i32.const 16) (i32.const 1) (i32.const 17) (i32.const 1)
      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i64.const 7))))
)
