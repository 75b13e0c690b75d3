;; A core module written by hand, as a compiler for another language (Go with
;; GOOS=wasip1, C with wasi-libc) would leave one: the naming export in the
;; canonical ABI (the request by pointer, the result through a return area),
;; cabi_realloc, its memory, and one WASI preview 1 import for the adapter.
;; `berth policy component` makes it a component; it names every volume "wat-name".
(module
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 1024) "wat-name")
  (func (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32) (param $size i32) (result i32)
    (local $p i32)
    ;; bump: round up to the alignment, hand out, move on
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $p) (local.get $size)))
    (local.get $p))
  (func (export "berth:policy/naming@0.4.0#volume-name") (param $request i32) (result i32)
    (i32.store8 (i32.const 2048) (i32.const 0))
    (i32.store (i32.const 2052) (i32.const 1024))
    (i32.store (i32.const 2056) (i32.const 8))
    (i32.const 2048))
)
