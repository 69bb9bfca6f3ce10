;; initfill: wasmstream_init loops on memory.fill of 32 MiB: a few fuel units per iteration
;; before fills were charged by size, so its start-up budget allowed hours of CPU and a deploy
;; of it never answered. Now its init budget stops it within about a second.
(module
  (memory (export "memory") 513)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32)
    (loop $l (memory.fill (i32.const 4096) (i32.const 7) (i32.const 0x2000000)) (br $l))
    (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32) (i32.const 0))
)
