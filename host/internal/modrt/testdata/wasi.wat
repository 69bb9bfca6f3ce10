;; wasi: uses WASI. wasmstream_process looks at the first byte of the first record's value:
;;   'w' writes "hello\nwor" then "ld\n" then "tail" to stdout and "oops\n" to stderr, returns 0;
;;   'x' calls proc_exit(3).
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "hello\nworld\ntailoops\n")
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func $write (param $fd i32) (param $p i32) (param $n i32)
    (i32.store (i32.const 0) (local.get $p))
    (i32.store (i32.const 4) (local.get $n))
    (drop (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "wasmstream_process") (param $p i32) (param $len i32) (result i32)
    (local $c i32)
    ;; first record: kind(4) count(4) flags(4) partition(4) offset(8) ts(8) source, key, value
    (local.set $p (i32.add (local.get $p) (i32.const 32)))
    (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
    (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
    (local.set $c (i32.load8_u (i32.add (local.get $p) (i32.const 4))))
    (if (i32.eq (local.get $c) (i32.const 0x78)) (then (call $proc_exit (i32.const 3))))
    (call $write (i32.const 1) (i32.const 64) (i32.const 9))
    (call $write (i32.const 1) (i32.const 73) (i32.const 3))
    (call $write (i32.const 1) (i32.const 76) (i32.const 4))
    (call $write (i32.const 2) (i32.const 80) (i32.const 5))
    (i32.const 0))
)
