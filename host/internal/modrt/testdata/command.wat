;; command: built as a WASI command, not a reactor, as standard Go builds without
;; -buildmode=c-shared: it exports _start and no _initialize, and its exports trap until _start
;; ran (Go's runtime.notInitialized).
(module
  (memory (export "memory") 1)
  (func (export "wasmstream_abi_version") (result i32) unreachable)
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
  (func (export "_start"))
)
