;; httpguest: an ABI 0.2 guest that makes one outbound HTTP request per record (http_request,
;; http_response) and emits what it got. The tests use it to reach http_request with any
;; arguments, valid or hostile.
;;
;; Each record's value is
;;   u32 flags     bit 0: do not call http_request; call http_response(0x1000, 0x7000) only
;;   u32 req_ptr   0xffffffff: the request bytes that follow this 20-byte prefix
;;   u32 req_len   0xffffffff: their length
;;   u32 buf_ptr   0xffffffff: 0x1000
;;   u32 buf_cap
;;   request bytes (an HttpRequest layout, or anything)
;; Result n of http_request: n < 0 emits to "err" the 4 bytes of n (little-endian); n <= buf_cap
;; emits to "resp" the n bytes at buf_ptr; else the guest grows its memory by enough pages for n
;; bytes, calls http_response there and emits to "resp" what it copied (or to "err" its error).
;; With a task config that does not start with "{", init runs the config as such a value (its
;; emit fails there; the tests observe the http_request result on the host side).
;;
;; Memory: 0x20 the emitted error code, 0x40 "err", 0x48 "resp", 0x1000-0x7fff the default
;; response buffer, 0x10000 the payload buffer returned by wasmstream_alloc (grown as needed).
(module
  (import "wasmstream_v0" "http_request" (func $http_request (param i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "http_response" (func $http_response (param i32 i32) (result i32)))
  (import "wasmstream_v0" "emit" (func $emit (param i32 i32 i32 i32 i32 i32 i32 i32 i64) (result i32)))

  (memory (export "memory") 2)
  (data (i32.const 0x40) "err")
  (data (i32.const 0x48) "resp")

  (func (export "wasmstream_abi_version") (result i32) (i32.const 2))

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

  (func $err (param $code i32)
    (i32.store (i32.const 0x20) (local.get $code))
    (drop (call $emit (i32.const 0x40) (i32.const 3) (i32.const 0) (i32.const 0)
                      (i32.const 0x20) (i32.const 4) (i32.const 0) (i32.const 0) (i64.const -1))))

  (func $resp (param $ptr i32) (param $n i32)
    (drop (call $emit (i32.const 0x48) (i32.const 4) (i32.const 0) (i32.const 0)
                      (local.get $ptr) (local.get $n) (i32.const 0) (i32.const 0) (i64.const -1))))

  ;; run handles one value at [v, v+len).
  (func $run (param $v i32) (param $len i32)
    (local $rp i32) (local $rl i32) (local $bp i32) (local $bc i32) (local $n i32) (local $p i32)
    (if (i32.lt_u (local.get $len) (i32.const 20)) (then (return)))
    (local.set $rp (i32.load offset=4 (local.get $v)))
    (local.set $rl (i32.load offset=8 (local.get $v)))
    (local.set $bp (i32.load offset=12 (local.get $v)))
    (local.set $bc (i32.load offset=16 (local.get $v)))
    (if (i32.eq (local.get $rp) (i32.const -1))
      (then (local.set $rp (i32.add (local.get $v) (i32.const 20)))))
    (if (i32.eq (local.get $rl) (i32.const -1))
      (then (local.set $rl (i32.sub (local.get $len) (i32.const 20)))))
    (if (i32.eq (local.get $bp) (i32.const -1))
      (then (local.set $bp (i32.const 0x1000))))
    (if (i32.and (i32.load (local.get $v)) (i32.const 1))
      (then
        (local.set $n (call $http_response (i32.const 0x1000) (i32.const 0x7000)))
        (if (i32.lt_s (local.get $n) (i32.const 0))
          (then (call $err (local.get $n)))
          (else (call $resp (i32.const 0x1000) (local.get $n))))
        (return)))
    (local.set $n (call $http_request (local.get $rp) (local.get $rl) (local.get $bp) (local.get $bc)))
    (if (i32.lt_s (local.get $n) (i32.const 0))
      (then (call $err (local.get $n)) (return)))
    (if (i32.le_u (local.get $n) (local.get $bc))
      (then (call $resp (local.get $bp) (local.get $n)) (return)))
    ;; Too big for the buffer: fetch it into new pages at the end of memory.
    (local.set $p (i32.shl (memory.size) (i32.const 16)))
    (if (i32.lt_s (memory.grow (i32.shr_u (i32.add (local.get $n) (i32.const 0xffff)) (i32.const 16)))
                  (i32.const 0))
      (then (call $err (i32.const -100)) (return)))
    (local.set $n (call $http_response (local.get $p) (local.get $n)))
    (if (i32.lt_s (local.get $n) (i32.const 0))
      (then (call $err (local.get $n)))
      (else (call $resp (local.get $p) (local.get $n)))))

  ;; Init: u32 version, u32 task_len, task, u32 config_len, config.
  (func (export "wasmstream_init") (param $p i32) (param $len i32) (result i32)
    (local $c i32) (local $clen i32)
    (local.set $c (i32.add (i32.add (local.get $p) (i32.const 8)) (i32.load (i32.add (local.get $p) (i32.const 4)))))
    (local.set $clen (i32.load (local.get $c)))
    (local.set $c (i32.add (local.get $c) (i32.const 4)))
    (if (i32.and (i32.gt_u (local.get $clen) (i32.const 0))
                 (i32.ne (i32.load8_u (local.get $c)) (i32.const 0x7b)))
      (then (call $run (local.get $c) (local.get $clen))))
    (i32.const 0))

  ;; Batch: u32 kind, u32 count, records. Each record's value is run.
  (func (export "wasmstream_process") (param $p i32) (param $len i32) (result i32)
    (local $pos i32) (local $count i32) (local $h i32) (local $v i32) (local $vlen i32)
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
        (call $run (local.get $v) (local.get $vlen))
        (br $rec)))
    (i32.const 0))
)
