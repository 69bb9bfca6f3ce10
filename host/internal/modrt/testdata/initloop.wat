;; initloop: wasmstream_init loops forever (the module's _initialize and version are fine), so
;; Compile accepts it and every Instantiate must be stopped by the start-up budget.
(module
  (memory (export "memory") 1)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (loop $forever (br $forever)) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
)
