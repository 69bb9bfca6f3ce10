;; driver: a guest that runs a tiny program found in each record's value (and in the task config
;; when it does not start with "{"), calling host functions with the arguments the program gives.
;; The tests use it to reach every host function with any arguments, valid or hostile.
;;
;; Program: a sequence of ops, each
;;   u8 id | u8 relmask | nargs(id) × i32 arg | (id 4 only) i64 ts
;; Bit j of relmask set: arg j is relative to the start of the program (the address of the
;; record value), so a program can point at bytes it carries after its ops.
;;   id 0 state_get(6)  1 state_put(6)  2 state_delete(4)  3 state_scan(8)  4 emit(8 + ts)
;;      5 log(3)  6 now_ms(0)  7 config_get(2)  8 fail(2)
;;      9 return(1): stop and make the export return arg 0
;;     10 trap(0): unreachable
;; An unknown id or a truncated op ends the program. Host function results are ignored (the
;; tests observe them on the host side).
;;
;; Memory: 0x0080 nargs table, 0x0100 argument slots, 0x8000-0xffff free scratch for tests,
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

  (memory (export "memory") 2)
  (data (i32.const 0x80) "\06\06\04\08\08\03\00\02\02\01\00")

  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))

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

  ;; run executes the program in [start, end) and returns the export's status.
  (func $run (param $start i32) (param $end i32) (result i32)
    (local $pos i32) (local $id i32) (local $mask i32) (local $n i32) (local $j i32)
    (local $v i32) (local $ts i64)
    (local.set $pos (local.get $start))
    (block $stop
      (loop $next
        (br_if $stop (i32.gt_u (i32.add (local.get $pos) (i32.const 2)) (local.get $end)))
        (local.set $id (i32.load8_u (local.get $pos)))
        (local.set $mask (i32.load8_u (i32.add (local.get $pos) (i32.const 1))))
        (local.set $pos (i32.add (local.get $pos) (i32.const 2)))
        (br_if $stop (i32.gt_u (local.get $id) (i32.const 10)))
        (local.set $n (i32.load8_u (i32.add (i32.const 0x80) (local.get $id))))
        (br_if $stop (i32.gt_u
          (i32.add (i32.add (local.get $pos) (i32.shl (local.get $n) (i32.const 2)))
                   (select (i32.const 8) (i32.const 0) (i32.eq (local.get $id) (i32.const 4))))
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
        (if (i32.eq (local.get $id) (i32.const 4))
          (then
            (local.set $ts (i64.load (local.get $pos)))
            (local.set $pos (i32.add (local.get $pos) (i32.const 8)))))
        (block $done
          (block $b10 (block $b9 (block $b8 (block $b7 (block $b6 (block $b5
          (block $b4 (block $b3 (block $b2 (block $b1 (block $b0
            (br_table $b0 $b1 $b2 $b3 $b4 $b5 $b6 $b7 $b8 $b9 $b10 (local.get $id)))
            (drop (call $state_get (call $a (i32.const 0)) (call $a (i32.const 1)) (call $a (i32.const 2))
                                   (call $a (i32.const 3)) (call $a (i32.const 4)) (call $a (i32.const 5))))
            (br $done))
            (drop (call $state_put (call $a (i32.const 0)) (call $a (i32.const 1)) (call $a (i32.const 2))
                                   (call $a (i32.const 3)) (call $a (i32.const 4)) (call $a (i32.const 5))))
            (br $done))
            (drop (call $state_delete (call $a (i32.const 0)) (call $a (i32.const 1))
                                      (call $a (i32.const 2)) (call $a (i32.const 3))))
            (br $done))
            (drop (call $state_scan (call $a (i32.const 0)) (call $a (i32.const 1)) (call $a (i32.const 2))
                                    (call $a (i32.const 3)) (call $a (i32.const 4)) (call $a (i32.const 5))
                                    (call $a (i32.const 6)) (call $a (i32.const 7))))
            (br $done))
            (drop (call $emit (call $a (i32.const 0)) (call $a (i32.const 1)) (call $a (i32.const 2))
                              (call $a (i32.const 3)) (call $a (i32.const 4)) (call $a (i32.const 5))
                              (call $a (i32.const 6)) (call $a (i32.const 7)) (local.get $ts)))
            (br $done))
            (drop (call $log (call $a (i32.const 0)) (call $a (i32.const 1)) (call $a (i32.const 2))))
            (br $done))
            (drop (call $now_ms))
            (br $done))
            (drop (call $config_get (call $a (i32.const 0)) (call $a (i32.const 1))))
            (br $done))
            (drop (call $fail (call $a (i32.const 0)) (call $a (i32.const 1))))
            (br $done))
            (return (call $a (i32.const 0))))
            unreachable)
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
)
