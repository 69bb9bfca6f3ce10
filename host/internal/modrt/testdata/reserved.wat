;; reserved: a valid task module that exports a global under the name fuel metering reserves for
;; its counter.
(module
  (memory (export "memory") 1)
  (global (export "wasmstream.fuel") i32 (i32.const 0))
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
)
