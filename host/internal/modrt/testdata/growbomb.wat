;; growbomb: wasmstream_process tries memory.grow(65535) (4 GiB) and emits the result of the grow
;; and the memory size in pages afterwards, as two little-endian i32s, to output "grow".
(module
  (import "wasmstream_v0" "emit" (func $emit (param i32 i32 i32 i32 i32 i32 i32 i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "grow")
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32)
    (i32.store (i32.const 32) (memory.grow (i32.const 65535)))
    (i32.store (i32.const 36) (memory.size))
    (drop (call $emit (i32.const 16) (i32.const 4) (i32.const 0) (i32.const 0)
                      (i32.const 32) (i32.const 8) (i32.const 0) (i32.const 0) (i64.const -1)))
    (i32.const 0))
)
