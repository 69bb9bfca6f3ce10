;; badversion06: declares ABI 0.6, a minor newer than this host speaks.
(module
  (memory (export "memory") 1)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 6))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
)
