;; hostcalls: a hostile task whose wasmstream_process loops forever on one host call that does
;; much for few instructions, chosen by the first byte of the first record's value:
;;   r  random_get of 16 MiB
;;   p  poll_oneoff of 500,000 subscriptions (zeroed: clocks of 0 s)
;;   s  poll_oneoff on one clock subscription of an hour (a sleep, with the real clock granted)
;;   n  now_ms
;; Each call must be charged for what it does, so that the call spends its budget and is
;; dead-lettered like a plain loop, and a stop ends it at once.
(module
  (import "wasmstream_v0" "now_ms" (func $now (result i64)))
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 700)
  ;; at 2048, a clock subscription of an hour (3.6·10^12 ns), relative
  (data (i32.const 2072) "\00\a0\b8\30\46\03")
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param $p i32) (param $len i32) (result i32)
    (local $mode i32)
    ;; first record: kind(4) count(4) flags(4) partition(4) offset(8) ts(8) source, key, value
    (local.set $p (i32.add (local.get $p) (i32.const 32)))
    (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
    (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
    (local.set $mode (i32.load8_u (i32.add (local.get $p) (i32.const 4))))
    (loop $l
      (if (i32.eq (local.get $mode) (i32.const 0x72)) ;; r
        (then (drop (call $random (i32.const 65536) (i32.const 0x1000000)))))
      (if (i32.eq (local.get $mode) (i32.const 0x70)) ;; p
        (then (drop (call $poll (i32.const 65536) (i32.const 26000000) (i32.const 500000) (i32.const 4096)))))
      (if (i32.eq (local.get $mode) (i32.const 0x73)) ;; s
        (then (drop (call $poll (i32.const 2048) (i32.const 4096) (i32.const 1) (i32.const 4160)))))
      (if (i32.eq (local.get $mode) (i32.const 0x6e)) ;; n
        (then (drop (call $now))))
      (br $l))
    (i32.const 0))
)
