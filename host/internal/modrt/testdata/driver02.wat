;; driver02: the driver (see driver.wat) as an ABI 0.2 guest. It imports every 0.1 host function
;; and timer_set, timer_delete, watermark_ms and state_keys, exports every 0.2 callback, and runs
;; the same kind of program as the driver from:
;;   - wasmstream_init: the task config, when it does not start with "{";
;;   - wasmstream_process: each record's value;
;;   - wasmstream_on_timer: each firing's payload, in payload order;
;;   - wasmstream_on_tick: the tick's source bytes (the input name: the tests choose it).
;; wasmstream_migrate runs no program: it fails the call (fail "cannot downgrade", status 1) when
;; from > to; otherwise it writes state[key]["v"] = to (u32 little-endian) and emits to output
;; "migrated", key = the migrated key, value = the 12 bytes from, to, partition of the payload
;; (u32 little-endian each), timestamp -1. Host function results there are ignored.
;; wasmstream_state_version returns 2 unless a program (normally the init program) set it with
;; op 16.
;;
;; Program: a sequence of ops, each
;;   u8 id | u8 relmask | nargs(id) × i32 arg | (ids 4 and 11 only) i64
;; Bit j of relmask set: arg j is relative to the start of the program.
;;   ids 0-10 as in driver.wat (the i64 of id 4 is emit's ts)
;;     11 timer_set(7 + i64): key_ptr, key_len, name_ptr, name_len, domain, payload_ptr,
;;        payload_len; the i64 is the time (the host function takes it between domain and payload)
;;     12 timer_delete(4)
;;     13 watermark_ms(1): stores the i64 result little-endian at arg 0
;;     14 state_keys(4)
;;     15 emit_last(3): out_ptr, out_len, buf_ptr: emits to out (empty key, ts -1) the n bytes at
;;        buf_ptr, where n is the result of the latest host function op of the program, if n >= 0;
;;        nothing when n < 0
;;     16 set_version(1): wasmstream_state_version returns arg 0 from now on
;; An unknown id or a truncated op ends the program. Host function results are ignored (the tests
;; observe them on the host side) except by emit_last.
;;
;; Memory: 0x0080 nargs table, 0x0100 argument slots, 0x0200 "v", 0x0208 "migrated",
;; 0x0210 "cannot downgrade", 0x0230 migrate's value, 0x8000-0xffff free scratch for tests,
;; 0x10000 the payload buffer returned by wasmstream_alloc (grown as needed).
(module
  (import "wasmstream_v0" "state_get" (func $state_get (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "state_put" (func $state_put (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "state_delete" (func $state_delete (param i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "state_scan" (func $state_scan (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "emit" (func $emit (param i32 i32 i32 i32 i32 i32 i32 i32 i64) (result i32)))
  (import "wasmstream_v0" "log" (func $log (param i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "now_ms" (func $now_ms (result i64)))
  (import "wasmstream_v0" "config_get" (func $config_get (param i32 i32) (result i32)))
  (import "wasmstream_v0" "fail" (func $fail (param i32 i32) (result i32)))
  (import "wasmstream_v0" "timer_set" (func $timer_set (param i32 i32 i32 i32 i32 i64 i32 i32) (result i32)))
  (import "wasmstream_v0" "timer_delete" (func $timer_delete (param i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "watermark_ms" (func $watermark_ms (result i64)))
  (import "wasmstream_v0" "state_keys" (func $state_keys (param i32 i32 i32 i32) (result i32)))

  (memory (export "memory") 2)
  (data (i32.const 0x80) "\06\06\04\08\08\03\00\02\02\01\00\07\04\01\04\03\01")
  (data (i32.const 0x200) "v")
  (data (i32.const 0x208) "migrated")
  (data (i32.const 0x210) "cannot downgrade")

  (global $version (mut i32) (i32.const 2))
  (global $last (mut i64) (i64.const 0)) ;; the result of the latest host function op

  (func (export "wasmstream_abi_version") (result i32) (i32.const 2))

  (func (export "wasmstream_state_version") (result i32) (global.get $version))

  (func (export "wasmstream_alloc") (param $size i32) (result i32)
    (local $need i64) (local $have i64)
    (local.set $need (i64.add (i64.const 0x10000) (i64.extend_i32_u (local.get $size))))
    (local.set $have (i64.shl (i64.extend_i32_u (memory.size)) (i64.const 16)))
    (if (i64.gt_u (local.get $need) (local.get $have))
      (then
        (if (i32.lt_s
              (memory.grow (i32.wrap_i64
                (i64.shr_u (i64.add (i64.sub (local.get $need) (local.get $have)) (i64.const 0xffff))
                           (i64.const 16))))
              (i32.const 0))
          (then (return (i32.const 0))))))
    (i32.const 0x10000))

  ;; arg j of the current op
  (func $a (param $j i32) (result i32)
    (i32.load (i32.add (i32.const 0x100) (i32.shl (local.get $j) (i32.const 2)))))

  ;; set records an i32 host function result as the latest one.
  (func $set (param $r i32)
    (global.set $last (i64.extend_i32_s (local.get $r))))

  ;; run executes the program in [start, end) and returns the export's status.
  (func $run (param $start i32) (param $end i32) (result i32)
    (local $pos i32) (local $id i32) (local $mask i32) (local $n i32) (local $j i32)
    (local $v i32) (local $ts i64) (local $wide i32)
    (local.set $pos (local.get $start))
    (block $stop
      (loop $next
        (br_if $stop (i32.gt_u (i32.add (local.get $pos) (i32.const 2)) (local.get $end)))
        (local.set $id (i32.load8_u (local.get $pos)))
        (local.set $mask (i32.load8_u (i32.add (local.get $pos) (i32.const 1))))
        (local.set $pos (i32.add (local.get $pos) (i32.const 2)))
        (br_if $stop (i32.gt_u (local.get $id) (i32.const 16)))
        (local.set $n (i32.load8_u (i32.add (i32.const 0x80) (local.get $id))))
        (local.set $wide (i32.or (i32.eq (local.get $id) (i32.const 4)) (i32.eq (local.get $id) (i32.const 11))))
        (br_if $stop (i32.gt_u
          (i32.add (i32.add (local.get $pos) (i32.shl (local.get $n) (i32.const 2)))
                   (select (i32.const 8) (i32.const 0) (local.get $wide)))
          (local.get $end)))
        (local.set $j (i32.const 0))
        (block $argsdone
          (loop $arg
            (br_if $argsdone (i32.ge_u (local.get $j) (local.get $n)))
            (local.set $v (i32.load (local.get $pos)))
            (if (i32.and (i32.shr_u (local.get $mask) (local.get $j)) (i32.const 1))
              (then (local.set $v (i32.add (local.get $v) (local.get $start)))))
            (i32.store (i32.add (i32.const 0x100) (i32.shl (local.get $j) (i32.const 2))) (local.get $v))
            (local.set $pos (i32.add (local.get $pos) (i32.const 4)))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (br $arg)))
        (if (local.get $wide)
          (then
            (local.set $ts (i64.load (local.get $pos)))
            (local.set $pos (i32.add (local.get $pos) (i32.const 8)))))
        (block $done
          (block $b16 (block $b15 (block $b14 (block $b13 (block $b12 (block $b11
          (block $b10 (block $b9 (block $b8 (block $b7 (block $b6 (block $b5
          (block $b4 (block $b3 (block $b2 (block $b1 (block $b0
            (br_table $b0 $b1 $b2 $b3 $b4 $b5 $b6 $b7 $b8 $b9 $b10 $b11 $b12 $b13 $b14 $b15 $b16
                      (local.get $id)))
            (call $set (call $state_get (call $a (i32.const 0)) (call $a (i32.const 1)) (call $a (i32.const 2))
                                        (call $a (i32.const 3)) (call $a (i32.const 4)) (call $a (i32.const 5))))
            (br $done))
            (call $set (call $state_put (call $a (i32.const 0)) (call $a (i32.const 1)) (call $a (i32.const 2))
                                        (call $a (i32.const 3)) (call $a (i32.const 4)) (call $a (i32.const 5))))
            (br $done))
            (call $set (call $state_delete (call $a (i32.const 0)) (call $a (i32.const 1))
                                           (call $a (i32.const 2)) (call $a (i32.const 3))))
            (br $done))
            (call $set (call $state_scan (call $a (i32.const 0)) (call $a (i32.const 1)) (call $a (i32.const 2))
                                         (call $a (i32.const 3)) (call $a (i32.const 4)) (call $a (i32.const 5))
                                         (call $a (i32.const 6)) (call $a (i32.const 7))))
            (br $done))
            (call $set (call $emit (call $a (i32.const 0)) (call $a (i32.const 1)) (call $a (i32.const 2))
                                   (call $a (i32.const 3)) (call $a (i32.const 4)) (call $a (i32.const 5))
                                   (call $a (i32.const 6)) (call $a (i32.const 7)) (local.get $ts)))
            (br $done))
            (call $set (call $log (call $a (i32.const 0)) (call $a (i32.const 1)) (call $a (i32.const 2))))
            (br $done))
            (global.set $last (call $now_ms))
            (br $done))
            (call $set (call $config_get (call $a (i32.const 0)) (call $a (i32.const 1))))
            (br $done))
            (call $set (call $fail (call $a (i32.const 0)) (call $a (i32.const 1))))
            (br $done))
            (return (call $a (i32.const 0))))
            unreachable)
            ;; 11 timer_set
            (call $set (call $timer_set (call $a (i32.const 0)) (call $a (i32.const 1)) (call $a (i32.const 2))
                                        (call $a (i32.const 3)) (call $a (i32.const 4)) (local.get $ts)
                                        (call $a (i32.const 5)) (call $a (i32.const 6))))
            (br $done))
            ;; 12 timer_delete
            (call $set (call $timer_delete (call $a (i32.const 0)) (call $a (i32.const 1))
                                           (call $a (i32.const 2)) (call $a (i32.const 3))))
            (br $done))
            ;; 13 watermark_ms
            (global.set $last (call $watermark_ms))
            (i64.store (call $a (i32.const 0)) (global.get $last))
            (br $done))
            ;; 14 state_keys
            (call $set (call $state_keys (call $a (i32.const 0)) (call $a (i32.const 1))
                                         (call $a (i32.const 2)) (call $a (i32.const 3))))
            (br $done))
            ;; 15 emit_last
            (if (i64.ge_s (global.get $last) (i64.const 0))
              (then
                (drop (call $emit (call $a (i32.const 0)) (call $a (i32.const 1)) (i32.const 0) (i32.const 0)
                                  (call $a (i32.const 2)) (i32.wrap_i64 (global.get $last))
                                  (i32.const 0) (i32.const 0) (i64.const -1)))))
            (br $done))
          ;; 16 set_version
          (global.set $version (call $a (i32.const 0))))
        (br $next)))
    (i32.const 0))

  ;; Init: u32 version, u32 task_len, task, u32 config_len, config.
  (func (export "wasmstream_init") (param $p i32) (param $len i32) (result i32)
    (local $c i32) (local $clen i32)
    (local.set $c (i32.add (i32.add (local.get $p) (i32.const 8)) (i32.load (i32.add (local.get $p) (i32.const 4)))))
    (local.set $clen (i32.load (local.get $c)))
    (local.set $c (i32.add (local.get $c) (i32.const 4)))
    (if (i32.and (i32.gt_u (local.get $clen) (i32.const 0))
                 (i32.ne (i32.load8_u (local.get $c)) (i32.const 0x7b)))
      (then (return (call $run (local.get $c) (i32.add (local.get $c) (local.get $clen))))))
    (i32.const 0))

  ;; Batch: u32 kind, u32 count, records. Each record's value is run as a program.
  (func (export "wasmstream_process") (param $p i32) (param $len i32) (result i32)
    (local $pos i32) (local $count i32) (local $h i32) (local $v i32) (local $vlen i32) (local $rc i32)
    (local.set $count (i32.load (i32.add (local.get $p) (i32.const 4))))
    (local.set $pos (i32.add (local.get $p) (i32.const 8)))
    (block $end
      (loop $rec
        (br_if $end (i32.eqz (local.get $count)))
        (local.set $count (i32.sub (local.get $count) (i32.const 1)))
        (local.set $pos (i32.add (local.get $pos) (i32.const 24)))           ;; flags partition offset timestamp
        (local.set $pos (i32.add (i32.add (local.get $pos) (i32.const 4)) (i32.load (local.get $pos)))) ;; source
        (local.set $pos (i32.add (i32.add (local.get $pos) (i32.const 4)) (i32.load (local.get $pos)))) ;; key
        (local.set $vlen (i32.load (local.get $pos)))
        (local.set $v (i32.add (local.get $pos) (i32.const 4)))
        (local.set $pos (i32.add (local.get $v) (local.get $vlen)))
        (local.set $h (i32.load (local.get $pos)))
        (local.set $pos (i32.add (local.get $pos) (i32.const 4)))
        (block $hdone
          (loop $hdr
            (br_if $hdone (i32.eqz (local.get $h)))
            (local.set $h (i32.sub (local.get $h) (i32.const 1)))
            (local.set $pos (i32.add (i32.add (local.get $pos) (i32.const 4)) (i32.load (local.get $pos))))
            (local.set $pos (i32.add (i32.add (local.get $pos) (i32.const 4)) (i32.load (local.get $pos))))
            (br $hdr)))
        (local.set $rc (call $run (local.get $v) (i32.add (local.get $v) (local.get $vlen))))
        (if (local.get $rc) (then (return (local.get $rc))))
        (br $rec)))
    (i32.const 0))

  ;; Firings: u32 kind, u32 count, firings (u32 flags, u32 partition, i64 time, key, name,
  ;; payload). Each firing's payload is run as a program.
  (func (export "wasmstream_on_timer") (param $p i32) (param $len i32) (result i32)
    (local $pos i32) (local $count i32) (local $v i32) (local $vlen i32) (local $rc i32)
    (local.set $count (i32.load (i32.add (local.get $p) (i32.const 4))))
    (local.set $pos (i32.add (local.get $p) (i32.const 8)))
    (block $end
      (loop $firing
        (br_if $end (i32.eqz (local.get $count)))
        (local.set $count (i32.sub (local.get $count) (i32.const 1)))
        (local.set $pos (i32.add (local.get $pos) (i32.const 16)))           ;; flags partition time
        (local.set $pos (i32.add (i32.add (local.get $pos) (i32.const 4)) (i32.load (local.get $pos)))) ;; key
        (local.set $pos (i32.add (i32.add (local.get $pos) (i32.const 4)) (i32.load (local.get $pos)))) ;; name
        (local.set $vlen (i32.load (local.get $pos)))
        (local.set $v (i32.add (local.get $pos) (i32.const 4)))
        (local.set $pos (i32.add (local.get $v) (local.get $vlen)))
        (local.set $rc (call $run (local.get $v) (i32.add (local.get $v) (local.get $vlen))))
        (if (local.get $rc) (then (return (local.get $rc))))
        (br $firing)))
    (i32.const 0))

  ;; Tick: u32 kind, u32 partition, i64 now, i64 watermark, u32 source_len, source. The source
  ;; is run as a program.
  (func (export "wasmstream_on_tick") (param $p i32) (param $len i32) (result i32)
    (local $v i32)
    (local.set $v (i32.add (local.get $p) (i32.const 28)))
    (call $run (local.get $v) (i32.add (local.get $v) (i32.load (i32.add (local.get $p) (i32.const 24))))))

  ;; Migrate: u32 kind, u32 from, u32 to, u32 partition, u32 key_len, key.
  (func (export "wasmstream_migrate") (param $p i32) (param $len i32) (result i32)
    (local $key i32) (local $klen i32)
    (if (i32.gt_u (i32.load offset=4 (local.get $p)) (i32.load offset=8 (local.get $p)))
      (then
        (drop (call $fail (i32.const 0x210) (i32.const 16)))
        (return (i32.const 1))))
    (local.set $klen (i32.load offset=16 (local.get $p)))
    (local.set $key (i32.add (local.get $p) (i32.const 20)))
    (i32.store (i32.const 0x230) (i32.load offset=8 (local.get $p)))
    (drop (call $state_put (local.get $key) (local.get $klen) (i32.const 0x200) (i32.const 1)
                           (i32.const 0x230) (i32.const 4)))
    (drop (call $emit (i32.const 0x208) (i32.const 8) (local.get $key) (local.get $klen)
                      (i32.add (local.get $p) (i32.const 4)) (i32.const 12)
                      (i32.const 0) (i32.const 0) (i64.const -1)))
    (i32.const 0))
)
