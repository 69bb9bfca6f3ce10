;; failperm03: declares ABI 0.3 but imports fail_permanent, added in 0.4: refused at compile time.
(module
  (import "wasmstream_v0" "fail_permanent" (func $fp (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 3))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 0x2000))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
)
