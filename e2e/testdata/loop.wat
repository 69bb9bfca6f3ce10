;; loop: a hostile task whose wasmstream_process loops until its CPU budget is spent, on every
;; call: each batch fails after fuel_per_record × records units, is split and retried, and keeps
;; a worker in guest code for as long as its budget lasts.
(module
  (memory (export "memory") 1)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32)
    (loop $forever (br $forever))
    (i32.const 0))
)
