;; tablebig: a module declaring a table of 50,000,000 elements (424 MB per idle instance
;; before tables were bounded). It must be refused at validation.
(module
  (memory (export "memory") 1)
  (table 50000000 funcref)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
)
