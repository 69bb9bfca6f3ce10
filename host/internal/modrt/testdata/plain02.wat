;; plain02: an ABI 0.2 guest that exports none of the optional 0.2 callbacks. For the first record
;; of each batch it calls timer_set(key, "t", 0, 0, empty payload), timer_delete(key, "t") and
;; state_keys(from the start, 0x1000, 64); the tests observe the results on the host side.
(module
  (import "wasmstream_v0" "timer_set" (func $timer_set (param i32 i32 i32 i32 i32 i64 i32 i32) (result i32)))
  (import "wasmstream_v0" "timer_delete" (func $timer_delete (param i32 i32 i32 i32) (result i32)))
  (import "wasmstream_v0" "state_keys" (func $state_keys (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0x80) "t")
  (func (export "wasmstream_abi_version") (result i32) (i32.const 2))
  (func (export "wasmstream_alloc") (param i32) (result i32) (i32.const 0x2000))
  (func (export "wasmstream_init") (param i32 i32) (result i32) (i32.const 0))
  ;; Batch: u32 kind, u32 count, then the first record: 24 fixed bytes, source, key.
  (func (export "wasmstream_process") (param $p i32) (param $len i32) (result i32)
    (local $pos i32) (local $key i32) (local $klen i32)
    (if (i32.eqz (i32.load offset=4 (local.get $p))) (then (return (i32.const 0))))
    (local.set $pos (i32.add (local.get $p) (i32.const 32)))
    (local.set $pos (i32.add (i32.add (local.get $pos) (i32.const 4)) (i32.load (local.get $pos))))
    (local.set $klen (i32.load (local.get $pos)))
    (local.set $key (i32.add (local.get $pos) (i32.const 4)))
    (drop (call $timer_set (local.get $key) (local.get $klen) (i32.const 0x80) (i32.const 1)
                           (i32.const 0) (i64.const 0) (i32.const 0) (i32.const 0)))
    (drop (call $timer_delete (local.get $key) (local.get $klen) (i32.const 0x80) (i32.const 1)))
    (drop (call $state_keys (i32.const 0) (i32.const -1) (i32.const 0x1000) (i32.const 64)))
    (i32.const 0))
)
