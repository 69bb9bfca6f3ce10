;; growtrap: wasmstream_process grows its memory a page at a time up to the limit, writes to
;; every byte of it, then traps: the instance to discard holds a full memory.
(module
  (memory (export "memory") 1)
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param i32 i32) (result i32)
    (block $full
      (loop $grow
        (br_if $full (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
        (br $grow)))
    (memory.fill (i32.const 0) (i32.const 1) (i32.mul (memory.size) (i32.const 65536)))
    unreachable)
)
