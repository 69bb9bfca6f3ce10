;; hostcalls: loops of host calls that do little per call (or make many bytes for few
;; instructions), and poll_oneoff's answers. wasmstream_process reads the first record's value:
;; a mode byte, then a u32 count n (n = 0xffffffff: forever), and makes n calls of one kind:
;;   r  random_get of 1 MiB
;;   n  now_ms
;;   k  clock_time_get (the fake clock without a grant)
;;   p  poll_oneoff on one clock subscription of 1 s (the fake clock returns at once)
;;   P  poll_oneoff on 100,000 subscriptions (zeroed: clocks of 0 s)
;;   S  poll_oneoff on one clock subscription of an hour (with the real clock, a sleep)
;;   E  poll_oneoff on an fd_read (fd 0), an fd_write (fd 1) and a clock subscription of an
;;      hour; then state_put of the record's key, name "e": the errno (u32), the event count
;;      (u32) and the three events (32 bytes each)
;;   F  as E, but the subscriptions run past the end of memory (EFAULT)
;;   o  path_open of "big" n times, closing none; then state_put of the record's key, name "e":
;;      the opens that succeeded (u32) and the last errno (u32)
;;   f  fd_pread of 1 MiB at offset 0 of the file "big" in the first granted directory (fd 3)
;; Each call costs fuel.HostCallUnits; random_get a unit per byte besides, poll_oneoff a unit
;; per 4 bytes of subscriptions and events, fd_pread a unit per 4 bytes asked for.
(module
  (import "wasmstream_v0" "now_ms" (func $now (result i64)))
  (import "wasmstream_v0" "state_put" (func $put (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_pread" (func $pread (param i32 i32 i32 i64 i32) (result i32)))
  (memory (export "memory") 200)
  ;; a clock subscription at 2048: userdata 0, tag 0 (clock), id 0, timeout 1 s, relative
  (data (i32.const 2072) "\00\ca\9a\3b")
  ;; at 2560, three subscriptions: userdata 11, fd_read fd 0; userdata 12, fd_write fd 1;
  ;; userdata 13, a clock of an hour (3.6·10^12 ns)
  (data (i32.const 2560) "\0b")
  (data (i32.const 2568) "\01")
  (data (i32.const 2608) "\0c")
  (data (i32.const 2616) "\02")
  (data (i32.const 2624) "\01")
  (data (i32.const 2656) "\0d")
  (data (i32.const 2680) "\00\a0\b8\30\46\03")
  (data (i32.const 3000) "e")
  (data (i32.const 3100) "big")
  (data (i32.const 3200) "\00\00\01\00\00\00\10\00") ;; an iovec: 1 MiB at 64 KiB
  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "wasmstream_process") (param $p i32) (param $len i32) (result i32)
    (local $mode i32) (local $n i32) (local $key i32) (local $klen i32)
    ;; first record: kind(4) count(4) flags(4) partition(4) offset(8) ts(8) source, key, value
    (local.set $p (i32.add (local.get $p) (i32.const 32)))
    (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
    (local.set $klen (i32.load (local.get $p)))
    (local.set $key (i32.add (local.get $p) (i32.const 4)))
    (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
    (local.set $mode (i32.load8_u (i32.add (local.get $p) (i32.const 4))))
    (local.set $n (i32.load (i32.add (local.get $p) (i32.const 5))))
    (if (i32.or (i32.eq (local.get $mode) (i32.const 0x45)) (i32.eq (local.get $mode) (i32.const 0x46))) ;; E, F
      (then
        (i32.store (i32.const 4096) (call $poll
          (select (i32.const 13107190) (i32.const 2560) (i32.eq (local.get $mode) (i32.const 0x46)))
          (i32.const 4104) (i32.const 3) (i32.const 4100)))
        (drop (call $put (local.get $key) (local.get $klen) (i32.const 3000) (i32.const 1) (i32.const 4096) (i32.const 104)))
        (return (i32.const 0))))
    (if (i32.eq (local.get $mode) (i32.const 0x6f)) ;; o
      (then
        (block $opened (loop $open
          (br_if $opened (i32.eqz (local.get $n)))
          (local.set $n (i32.sub (local.get $n) (i32.const 1)))
          (i32.store (i32.const 3404) (call $path_open (i32.const 3) (i32.const 1) (i32.const 3100) (i32.const 3)
            (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 3300)))
          (if (i32.eqz (i32.load (i32.const 3404)))
            (then (i32.store (i32.const 3400) (i32.add (i32.load (i32.const 3400)) (i32.const 1)))))
          (br $open)))
        (drop (call $put (local.get $key) (local.get $klen) (i32.const 3000) (i32.const 1) (i32.const 3400) (i32.const 8)))
        (return (i32.const 0))))
    (if (i32.eq (local.get $mode) (i32.const 0x66)) ;; f: open "big" first
      (then (if (call $path_open (i32.const 3) (i32.const 1) (i32.const 3100) (i32.const 3)
                  (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 3300))
              (then unreachable))))
    (block $done
      (loop $l
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (if (i32.eq (local.get $mode) (i32.const 0x72)) ;; r
          (then (drop (call $random (i32.const 65536) (i32.const 0x100000)))))
        (if (i32.eq (local.get $mode) (i32.const 0x6e)) ;; n
          (then (drop (call $now))))
        (if (i32.eq (local.get $mode) (i32.const 0x6b)) ;; k
          (then (drop (call $clock (i32.const 0) (i64.const 1) (i32.const 4096)))))
        (if (i32.eq (local.get $mode) (i32.const 0x70)) ;; p
          (then (drop (call $poll (i32.const 2048) (i32.const 4096) (i32.const 1) (i32.const 4160)))))
        (if (i32.eq (local.get $mode) (i32.const 0x50)) ;; P
          (then (drop (call $poll (i32.const 65536) (i32.const 6000000) (i32.const 100000) (i32.const 4160)))))
        (if (i32.eq (local.get $mode) (i32.const 0x53)) ;; S
          (then (drop (call $poll (i32.const 2656) (i32.const 4096) (i32.const 1) (i32.const 4160)))))
        (if (i32.eq (local.get $mode) (i32.const 0x66)) ;; f
          (then (drop (call $pread (i32.load (i32.const 3300)) (i32.const 3200) (i32.const 1) (i64.const 0) (i32.const 3304)))))
        (br $l)))
    (i32.const 0))
)
