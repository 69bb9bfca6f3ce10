;; badwasi: imports a function WASI does not have, and fd_write with the wrong signature.
(module
  (import "wasi_snapshot_preview1" "frobnicate" (func))
  (import "wasi_snapshot_preview1" "fd_write" (func (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
)
