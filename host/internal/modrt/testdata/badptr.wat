;; badptr: wasmstream_process calls every host function that takes a pointer with hostile
;; (pointer, length) pairs, one argument pair at a time, the others valid, and emits the statuses.
;;
;; Bad pairs (memory is one page, 65536 bytes):
;;   (0x7fffffff, 16) far past the end      (65530, 16) straddles the end
;;   (16, -1) negative length               (0xfffffff0, 32) ptr+len wraps in 32 bits
;;   (-1, 1) "negative" pointer             (65536, 1) starts at the end
;;   (16, 0x7fffffff) huge length           (0x80000000, 0x80000000) both negative
;; For state_scan's `after` a length of -1 means "from the start", so -2 replaces it there.
;; (An empty range is valid whatever its pointer, ABI §4, so none of the pairs has length 0.)
;;
;; Functions, in order, with their pointer pairs ("slots"): state_get 3, state_put 3,
;; state_delete 2, state_scan 4, emit 4, log 1, config_get 1, fail 1: 19 slots × 8 pairs = 152
;; statuses. Then each function once more with valid arguments (8 statuses). All 160 statuses are
;; emitted to output "out" with the first record's key, as little-endian i32s.
(module
  (import "wasmstream_v0" "state_get" (func $state_get (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "state_put" (func $state_put (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "state_delete" (func $state_delete (param i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "state_scan" (func $state_scan (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "emit" (func $emit (param i32 i32 i32 i32 i32 i32 i32 i32 i64) (result i32)))
  (import "wasmstream_v0" "log" (func $log (param i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "config_get" (func $config_get (param i32 i32) (result i32)))
  (import "wasmstream_v0" "fail" (func $fail (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  (data (i32.const 16) "name")
  (data (i32.const 24) "out")
  ;; 32: an empty Headers layout (count 0): memory starts zeroed
  (data (i32.const 48) "msg")
  (data (i32.const 64) "\03\03\02\04\04\01\01\01") ;; slots per function
  (data (i32.const 512)
    "\ff\ff\ff\7f\10\00\00\00"
    "\fa\ff\00\00\10\00\00\00"
    "\10\00\00\00\ff\ff\ff\ff"
    "\f0\ff\ff\ff\20\00\00\00"
    "\ff\ff\ff\ff\01\00\00\00"
    "\00\00\01\00\01\00\00\00"
    "\10\00\00\00\ff\ff\ff\7f"
    "\00\00\00\80\00\00\00\80")

  (global $kp (mut i32) (i32.const 0))
  (global $kl (mut i32) (i32.const 0))

  (func (export "wasmstream_abi_version") (result i32) (i32.const 1))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))

  ;; sel: bad when slot == k, else good
  (func $sel (param $slot i32) (param $k i32) (param $bad i32) (param $good i32) (result i32)
    (select (local.get $bad) (local.get $good) (i32.eq (local.get $slot) (local.get $k))))

  ;; call: function f with pointer pair number `slot` replaced by (p, l)
  (func $call (param $f i32) (param $s i32) (param $p i32) (param $l i32) (result i32)
    (block $b7 (block $b6 (block $b5 (block $b4 (block $b3 (block $b2 (block $b1 (block $b0
      (br_table $b0 $b1 $b2 $b3 $b4 $b5 $b6 $b7 (local.get $f)))
      (return (call $state_get
        (call $sel (local.get $s) (i32.const 0) (local.get $p) (global.get $kp))
        (call $sel (local.get $s) (i32.const 0) (local.get $l) (global.get $kl))
        (call $sel (local.get $s) (i32.const 1) (local.get $p) (i32.const 16))
        (call $sel (local.get $s) (i32.const 1) (local.get $l) (i32.const 4))
        (call $sel (local.get $s) (i32.const 2) (local.get $p) (i32.const 256))
        (call $sel (local.get $s) (i32.const 2) (local.get $l) (i32.const 64)))))
      (return (call $state_put
        (call $sel (local.get $s) (i32.const 0) (local.get $p) (global.get $kp))
        (call $sel (local.get $s) (i32.const 0) (local.get $l) (global.get $kl))
        (call $sel (local.get $s) (i32.const 1) (local.get $p) (i32.const 16))
        (call $sel (local.get $s) (i32.const 1) (local.get $l) (i32.const 4))
        (call $sel (local.get $s) (i32.const 2) (local.get $p) (i32.const 16))
        (call $sel (local.get $s) (i32.const 2) (local.get $l) (i32.const 4)))))
      (return (call $state_delete
        (call $sel (local.get $s) (i32.const 0) (local.get $p) (global.get $kp))
        (call $sel (local.get $s) (i32.const 0) (local.get $l) (global.get $kl))
        (call $sel (local.get $s) (i32.const 1) (local.get $p) (i32.const 16))
        (call $sel (local.get $s) (i32.const 1) (local.get $l) (i32.const 4)))))
      (return (call $state_scan
        (call $sel (local.get $s) (i32.const 0) (local.get $p) (global.get $kp))
        (call $sel (local.get $s) (i32.const 0) (local.get $l) (global.get $kl))
        (call $sel (local.get $s) (i32.const 1) (local.get $p) (i32.const 16))
        (call $sel (local.get $s) (i32.const 1) (local.get $l) (i32.const 0))
        (call $sel (local.get $s) (i32.const 2) (local.get $p) (i32.const 16))
        (call $sel (local.get $s) (i32.const 2)
          (select (i32.const -2) (local.get $l) (i32.eq (local.get $l) (i32.const -1)))
          (i32.const -1))
        (call $sel (local.get $s) (i32.const 3) (local.get $p) (i32.const 256))
        (call $sel (local.get $s) (i32.const 3) (local.get $l) (i32.const 64)))))
      (return (call $emit
        (call $sel (local.get $s) (i32.const 0) (local.get $p) (i32.const 24))
        (call $sel (local.get $s) (i32.const 0) (local.get $l) (i32.const 3))
        (call $sel (local.get $s) (i32.const 1) (local.get $p) (global.get $kp))
        (call $sel (local.get $s) (i32.const 1) (local.get $l) (global.get $kl))
        (call $sel (local.get $s) (i32.const 2) (local.get $p) (i32.const 16))
        (call $sel (local.get $s) (i32.const 2) (local.get $l) (i32.const 4))
        (call $sel (local.get $s) (i32.const 3) (local.get $p) (i32.const 32))
        (call $sel (local.get $s) (i32.const 3) (local.get $l) (i32.const 4))
        (i64.const -1))))
      (return (call $log (i32.const 1)
        (call $sel (local.get $s) (i32.const 0) (local.get $p) (i32.const 48))
        (call $sel (local.get $s) (i32.const 0) (local.get $l) (i32.const 3)))))
      (return (call $config_get
        (call $sel (local.get $s) (i32.const 0) (local.get $p) (i32.const 256))
        (call $sel (local.get $s) (i32.const 0) (local.get $l) (i32.const 64)))))
    (call $fail
      (call $sel (local.get $s) (i32.const 0) (local.get $p) (i32.const 48))
      (call $sel (local.get $s) (i32.const 0) (local.get $l) (i32.const 3))))

  (func (export "wasmstream_process") (param $p i32) (param $len i32) (result i32)
    (local $f i32) (local $s i32) (local $b i32) (local $out i32)
    ;; first record's key: kind(4) count(4) flags(4) partition(4) offset(8) ts(8) source key
    (local.set $p (i32.add (local.get $p) (i32.const 32)))
    (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
    (global.set $kl (i32.load (local.get $p)))
    (global.set $kp (i32.add (local.get $p) (i32.const 4)))
    (local.set $out (i32.const 4096))
    (loop $fn
      (local.set $s (i32.const 0))
      (loop $slot
        (local.set $b (i32.const 0))
        (loop $pair
          (i32.store (local.get $out)
            (call $call (local.get $f) (local.get $s)
              (i32.load (i32.add (i32.const 512) (i32.shl (local.get $b) (i32.const 3))))
              (i32.load (i32.add (i32.const 516) (i32.shl (local.get $b) (i32.const 3))))))
          (local.set $out (i32.add (local.get $out) (i32.const 4)))
          (local.set $b (i32.add (local.get $b) (i32.const 1)))
          (br_if $pair (i32.lt_u (local.get $b) (i32.const 8))))
        (local.set $s (i32.add (local.get $s) (i32.const 1)))
        (br_if $slot (i32.lt_u (local.get $s) (i32.load8_u (i32.add (i32.const 64) (local.get $f))))))
      (local.set $f (i32.add (local.get $f) (i32.const 1)))
      (br_if $fn (i32.lt_u (local.get $f) (i32.const 8))))
    ;; each function once with valid arguments
    (local.set $f (i32.const 0))
    (loop $good
      (i32.store (local.get $out) (call $call (local.get $f) (i32.const 99) (i32.const 0) (i32.const 0)))
      (local.set $out (i32.add (local.get $out) (i32.const 4)))
      (local.set $f (i32.add (local.get $f) (i32.const 1)))
      (br_if $good (i32.lt_u (local.get $f) (i32.const 8))))
    (drop (call $emit (i32.const 24) (i32.const 3) (global.get $kp) (global.get $kl)
                      (i32.const 4096) (i32.sub (local.get $out) (i32.const 4096))
                      (i32.const 0) (i32.const 0) (i64.const -1)))
    (i32.const 0))
)
