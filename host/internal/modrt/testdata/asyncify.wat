;; asyncify: a working guest that also exports asyncify_start_unwind and the other functions
;; Binaryen's asyncify pass adds, as a TinyGo module built with the default scheduler does
;; (without -scheduler=none). It echoes nothing and fails nothing.
(module
  (memory (export "memory") 1)
  (global $state (mut i32) (i32.const 0))
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
  (func (export "asyncify_start_unwind") (param i32) (global.set $state (i32.const 1)))
  (func (export "asyncify_stop_unwind") (global.set $state (i32.const 0)))
  (func (export "asyncify_start_rewind") (param i32) (global.set $state (i32.const 2)))
  (func (export "asyncify_get_state") (result i32) (global.get $state))
)
