;; metrics02: declares ABI 0.2 but imports metric_add, added in 0.3: refused at compile time.
(module
  (import "wasmstream_v0" "metric_add" (func $add (param i32 i64) (result i32)))
  (memory (export "memory") 1)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 2))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 0x2000))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
)
