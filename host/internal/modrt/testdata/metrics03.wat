;; metrics03: an ABI 0.3 guest using guest metrics. Init declares the counter "words" with the label
;; lang="en" (id 0), the gauge "last_batch" (id 1), the counter "words" again (id 0 again), and
;; tries hostile declarations: a bad name, a reserved label, the name "words" as a gauge, a
;; negative label length. Each process call adds the batch's record count to "words", sets
;; "last_batch" to it, and tries a declaration, a negative counter delta, metric_set on a counter
;; and an unknown id. The tests observe every result on the host side.
(module
  (import "wasmstream_v0" "metric_declare" (func $declare (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "metric_add" (func $add (param i32 i64) (result i32)))
  (import "wasmstream_v0" "metric_set" (func $set (param i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0x100) "words")
  (data (i32.const 0x110) "last_batch")
  (data (i32.const 0x120) "bad name")
  ;; Headers: count 1, "lang" = "en".
  (data (i32.const 0x200) "\01\00\00\00\04\00\00\00lang\02\00\00\00en")
  ;; Headers: count 1, "task" = "x".
  (data (i32.const 0x240) "\01\00\00\00\04\00\00\00task\01\00\00\00x")
  (func (export "wasmstream_abi_version") (result i32) (i32.const 3))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 0x2000))
  (func (export "wasmstream_init") (param i32 i32) (result i32)
    (drop (call $declare (i32.const 0) (i32.const 0x100) (i32.const 5) (i32.const 0x200) (i32.const 18)))
    (drop (call $declare (i32.const 1) (i32.const 0x110) (i32.const 10) (i32.const 0) (i32.const 0)))
    (drop (call $declare (i32.const 0) (i32.const 0x100) (i32.const 5) (i32.const 0x200) (i32.const 18)))
    (drop (call $declare (i32.const 0) (i32.const 0x120) (i32.const 8) (i32.const 0) (i32.const 0)))
    (drop (call $declare (i32.const 0) (i32.const 0x100) (i32.const 5) (i32.const 0x240) (i32.const 17)))
    (drop (call $declare (i32.const 1) (i32.const 0x100) (i32.const 5) (i32.const 0x200) (i32.const 18)))
    (drop (call $declare (i32.const 0) (i32.const 0x100) (i32.const 5) (i32.const 0x200) (i32.const -1)))
    (i32.const 0))
  ;; Batch: u32 kind, u32 count.
  (func (export "wasmstream_process") (param $p i32) (param $len i32) (result i32)
    (local $n i64)
    (local.set $n (i64.extend_i32_u (i32.load offset=4 (local.get $p))))
    (drop (call $add (i32.const 0) (local.get $n)))
    (drop (call $set (i32.const 1) (local.get $n)))
    (drop (call $declare (i32.const 1) (i32.const 0x110) (i32.const 10) (i32.const 0) (i32.const 0)))
    (drop (call $add (i32.const 0) (i64.const -1)))
    (drop (call $set (i32.const 0) (i64.const 5)))
    (drop (call $add (i32.const 2) (i64.const 1)))
    (i32.const 0))
)
