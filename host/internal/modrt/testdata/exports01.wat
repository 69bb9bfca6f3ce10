;; exports01: declares ABI 0.1 and exports the 0.2 callbacks, which the host must ignore (ABI.md
;; §2). Each callback would trap if called; wasmstream_state_version returns 9.
(module
  (memory (export "memory") 1)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_on_timer") (param i32 i32) (result i32) unreachable)
  (func (export "wasmstream_on_tick") (param i32 i32) (result i32) unreachable)
  (func (export "wasmstream_migrate") (param i32 i32) (result i32) unreachable)
  (func (export "wasmstream_state_version") (result i32) (i32.const 9))
)
