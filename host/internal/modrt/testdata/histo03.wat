;; histo03: an ABI 0.3 guest declaring a histogram. Init declares the histogram "latency_seconds"
;; with the label lang="en" and bounds 0.1, 1, 10 (id 0), the counter "calls" (id 1), the
;; histogram again (id 0 again), and tries hostile declarations: bounds not increasing, bounds
;; whose length is not a multiple of 8, no bounds, the same name with other bounds, and
;; metric_declare of kind 2 (a histogram without bounds). Each process call observes 0.05, 1 and
;; 100 and tries NaN, an observation of the counter and metric_add on the histogram. The tests
;; observe every result on the host side.
(module
  (import "wasmstream_v0" "metric_declare" (func $declare (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "metric_declare_histogram" (func $histo (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "metric_observe" (func $observe (param i32 f64) (result i32)))
  (import "wasmstream_v0" "metric_add" (func $add (param i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0x100) "latency_seconds")
  (data (i32.const 0x120) "calls")
  ;; Headers: count 1, "lang" = "en".
  (data (i32.const 0x200) "\01\00\00\00\04\00\00\00lang\02\00\00\00en")
  ;; Bounds 0.1, 1, 10.
  (data (i32.const 0x300) "\9a\99\99\99\99\99\b9\3f\00\00\00\00\00\00\f0\3f\00\00\00\00\00\00\24\40")
  ;; Bounds 1, 0.5: not increasing.
  (data (i32.const 0x340) "\00\00\00\00\00\00\f0\3f\00\00\00\00\00\00\e0\3f")
  (func (export "wasmstream_abi_version") (result i32) (i32.const 3))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 0x2000))
  (func (export "wasmstream_init") (param i32 i32) (result i32)
    (drop (call $histo (i32.const 0x100) (i32.const 15) (i32.const 0x200) (i32.const 18) (i32.const 0x300) (i32.const 24)))
    (drop (call $declare (i32.const 0) (i32.const 0x120) (i32.const 5) (i32.const 0) (i32.const 0)))
    (drop (call $histo (i32.const 0x100) (i32.const 15) (i32.const 0x200) (i32.const 18) (i32.const 0x300) (i32.const 24)))
    (drop (call $histo (i32.const 0x120) (i32.const 5) (i32.const 0) (i32.const 0) (i32.const 0x340) (i32.const 16)))
    (drop (call $histo (i32.const 0x120) (i32.const 5) (i32.const 0) (i32.const 0) (i32.const 0x300) (i32.const 12)))
    (drop (call $histo (i32.const 0x120) (i32.const 5) (i32.const 0) (i32.const 0) (i32.const 0x300) (i32.const 0)))
    (drop (call $histo (i32.const 0x100) (i32.const 15) (i32.const 0x200) (i32.const 18) (i32.const 0x300) (i32.const 16)))
    (drop (call $declare (i32.const 2) (i32.const 0x100) (i32.const 15) (i32.const 0x200) (i32.const 18)))
    (i32.const 0))
  (func (export "wasmstream_process") (param $p i32) (param $len i32) (result i32)
    (drop (call $observe (i32.const 0) (f64.const 0.05)))
    (drop (call $observe (i32.const 0) (f64.const 1)))
    (drop (call $observe (i32.const 0) (f64.const 100)))
    (drop (call $observe (i32.const 0) (f64.const nan)))
    (drop (call $observe (i32.const 1) (f64.const 1)))
    (drop (call $add (i32.const 0) (i64.const 1)))
    (i32.const 0))
)
