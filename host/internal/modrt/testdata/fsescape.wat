;; fsescape: a hostile guest that tries to leave its granted directory, the first preopen (fd 3),
;; with raw WASI calls (no libc to clean its paths). wasmstream_process takes the first record's
;; value as one command, a letter and its argument:
;;   s<target>\00<link>  path_symlink(target, 3, link)
;;   r<path>             path_open(3, follow symlinks, path, read) and read up to 256 bytes
;;   l<path>             the same without following symlinks
;;   w<path>             path_open(3, follow, path, write) and write "PWNED"
;;   c<path>             path_open(3, follow, path, create|truncate, write) and write "PWNED"
;; and writes one line to stdout: the errno in two digits, a space, and what it read.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_symlink" (func $path_symlink (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; 0: iovec; 16: opened fd; 20: bytes read or written; 32: "PWNED"; 100: the output line;
  ;; 512: read buffer; 1024: where the host puts the batch.
  (data (i32.const 32) "PWNED")
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func $open (param $follow i32) (param $p i32) (param $n i32) (param $oflags i32) (param $rights i64) (result i32)
    (call $path_open (i32.const 3) (local.get $follow) (local.get $p) (local.get $n)
      (local.get $oflags) (local.get $rights) (i64.const 0) (i32.const 0) (i32.const 16)))
  (func (export "wasmstream_process") (param $p i32) (param $len i32) (result i32)
    (local $v i32) (local $n i32) (local $op i32) (local $errno i32) (local $split i32) (local $got i32)
    ;; first record: kind(4) count(4) flags(4) partition(4) offset(8) ts(8) source, key, value
    (local.set $p (i32.add (local.get $p) (i32.const 32)))
    (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
    (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
    (local.set $n (i32.sub (i32.load (local.get $p)) (i32.const 1)))
    (local.set $op (i32.load8_u (i32.add (local.get $p) (i32.const 4))))
    (local.set $v (i32.add (local.get $p) (i32.const 5)))
    (if (i32.eq (local.get $op) (i32.const 0x73)) ;; s
      (then
        (local.set $split (local.get $v))
        (block $found (loop $scan
          (br_if $found (i32.eqz (i32.load8_u (local.get $split))))
          (local.set $split (i32.add (local.get $split) (i32.const 1)))
          (br $scan)))
        (local.set $errno (call $path_symlink
          (local.get $v) (i32.sub (local.get $split) (local.get $v))
          (i32.const 3)
          (i32.add (local.get $split) (i32.const 1))
          (i32.sub (i32.add (local.get $v) (local.get $n)) (i32.add (local.get $split) (i32.const 1)))))))
    (if (i32.or (i32.eq (local.get $op) (i32.const 0x72)) (i32.eq (local.get $op) (i32.const 0x6c))) ;; r, l
      (then
        (local.set $errno (call $open (i32.eq (local.get $op) (i32.const 0x72))
          (local.get $v) (local.get $n) (i32.const 0) (i64.const 2)))
        (if (i32.eqz (local.get $errno))
          (then
            (i32.store (i32.const 0) (i32.const 512))
            (i32.store (i32.const 4) (i32.const 256))
            (local.set $errno (call $fd_read (i32.load (i32.const 16)) (i32.const 0) (i32.const 1) (i32.const 20)))
            (if (i32.eqz (local.get $errno)) (then (local.set $got (i32.load (i32.const 20)))))
            (drop (call $fd_close (i32.load (i32.const 16))))))))
    (if (i32.or (i32.eq (local.get $op) (i32.const 0x77)) (i32.eq (local.get $op) (i32.const 0x63))) ;; w, c
      (then
        (local.set $errno (call $open (i32.const 1) (local.get $v) (local.get $n)
          (select (i32.const 9) (i32.const 0) (i32.eq (local.get $op) (i32.const 0x63))) (i64.const 64)))
        (if (i32.eqz (local.get $errno))
          (then
            (i32.store (i32.const 0) (i32.const 32))
            (i32.store (i32.const 4) (i32.const 5))
            (local.set $errno (call $fd_write (i32.load (i32.const 16)) (i32.const 0) (i32.const 1) (i32.const 20)))
            (drop (call $fd_close (i32.load (i32.const 16))))))))
    ;; "NN <data>\n"
    (i32.store8 (i32.const 100) (i32.add (i32.const 0x30) (i32.div_u (local.get $errno) (i32.const 10))))
    (i32.store8 (i32.const 101) (i32.add (i32.const 0x30) (i32.rem_u (local.get $errno) (i32.const 10))))
    (i32.store8 (i32.const 102) (i32.const 0x20))
    (memory.copy (i32.const 103) (i32.const 512) (local.get $got))
    (i32.store8 (i32.add (i32.const 103) (local.get $got)) (i32.const 0x0a))
    (i32.store (i32.const 0) (i32.const 100))
    (i32.store (i32.const 4) (i32.add (local.get $got) (i32.const 4)))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 20)))
    (i32.const 0))
)
