;; spin: a CPU-bound fixture for fuel metering. wasmstream_process reads the first 4 bytes of the
;; first record's value as a little-endian u32 n and runs a loop of n iterations (a small
;; arithmetic body), then returns 0; n = 0xffffffff loops forever instead.
(module
  (memory (export "memory") 1)
  (global $sink (mut i32) (i32.const 0))
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param $p i32) (param $len i32) (result i32)
    (local $n i32) (local $x i32)
    ;; first record: kind(4) count(4) flags(4) partition(4) offset(8) ts(8) source, key, value
    (local.set $p (i32.add (local.get $p) (i32.const 32)))
    (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
    (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
    (local.set $n (i32.load (i32.add (local.get $p) (i32.const 4))))
    (if (i32.eq (local.get $n) (i32.const -1))
      (then (loop $forever (br $forever))))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $x (i32.add (i32.mul (local.get $x) (i32.const 31)) (local.get $n)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $next)))
    (global.set $sink (local.get $x))
    (i32.const 0))
)
