;; badsig: wasmstream_alloc takes two parameters, state_get is imported with one, _initialize
;; returns a value and "memory" is a function.
(module
  (import "wasmstream_v0" "state_get" (func (param i32) (result i32)))
  (memory 1)
  (func (export "memory"))
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32 i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
  (func (export "_initialize") (result i32) (i32.const 0))
)
