;; recurse: wasmstream_process recurses without end (each frame adds one to its argument), until
;; the runtime's stack or the call's fuel runs out.
(module
  (memory (export "memory") 1)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func $down (param $d i32) (result i32)
    (i32.add (call $down (i32.add (local.get $d) (i32.const 1))) (i32.const 1)))
  (func (export "wasmstream_process") (param i32 i32) (result i32)
    (call $down (i32.const 0)))
)
