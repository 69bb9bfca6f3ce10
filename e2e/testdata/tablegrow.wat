;; tablegrow: every wasmstream_process grows its table by 50,000 elements, which must succeed,
;; then by 100,000,000, which must fail (-1) under the default max_table_elements (100,000);
;; otherwise it fails the call. Without a table limit the second grow takes 800 MB, again on
;; every record.
(module
  (import "wasmstream_v0" "fail" (func $fail (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (table $t 1 funcref)
  (data (i32.const 16) "table.grow past the limit succeeded")
  (data (i32.const 64) "table.grow within the limit failed")
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32)
    (if (i32.ge_u (table.size $t) (i32.const 50001))
      (then (return (i32.const 0)))) ;; an instance already grown: nothing more fits
    (if (i32.eq (table.grow $t (ref.null func) (i32.const 50000)) (i32.const -1))
      (then (drop (call $fail (i32.const 64) (i32.const 34))) (return (i32.const 1))))
    (if (i32.ne (table.grow $t (ref.null func) (i32.const 100000000)) (i32.const -1))
      (then (drop (call $fail (i32.const 16) (i32.const 35))) (return (i32.const 1))))
    (i32.const 0))
)
