;; timer01: declares ABI 0.1 but imports timer_set, a 0.2 host function: refused.
(module
  (import "wasmstream_v0" "timer_set" (func (param i32 i32 i32 i32 i32 i64 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_on_timer") (param i32 i32) (result i32) (i32.const 0))
)
