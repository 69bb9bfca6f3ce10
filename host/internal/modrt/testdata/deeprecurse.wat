;; deeprecurse: wasmstream_process recurses without end, each frame small, with the call made both
;; directly and through a table (call_indirect). Without a bound on the guest's call stack the
;; runtime's own stack grows to its ceiling (about 100 MiB more per worker) before it traps.
(module
  (type $r (func (param i32) (result i32)))
  (memory (export "memory") 1)
  (table 1 funcref)
  (elem (i32.const 0) $down)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func $down (param $n i32) (result i32)
    (if (result i32) (i32.and (local.get $n) (i32.const 1))
      (then (call $down (i32.add (local.get $n) (i32.const 1))))
      (else (call_indirect (type $r) (i32.add (local.get $n) (i32.const 1)) (i32.const 0)))))
  (func (export "wasmstream_process") (param i32 i32) (result i32)
    (drop (call $down (i32.const 0)))
    (i32.const 0))
)
