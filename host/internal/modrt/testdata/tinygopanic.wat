;; tinygopanic: wasmstream_process does what a TinyGo guest does on a panic: it prints a line of
;; its own and then "panic: …" to stdout (fd 1) through WASI fd_write, the panic message
;; without its newline first, as TinyGo's runtime writes it piece by piece, and traps
;; (unreachable).
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "processing record\n")
  (data (i32.const 128) "panic: runtime error: index out of range [3] with length 2")
  (data (i32.const 250) "\n")
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func $write (param $p i32) (param $n i32)
    (i32.store (i32.const 0) (local.get $p))
    (i32.store (i32.const 4) (local.get $n))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "wasmstream_process") (param i32 i32) (result i32)
    (call $write (i32.const 64) (i32.const 18))
    (call $write (i32.const 128) (i32.const 58))
    (call $write (i32.const 250) (i32.const 1))
    unreachable)
)
