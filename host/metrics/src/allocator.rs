//! Memory: the allocator the `berth` binary runs on, and giving memory back
//! after a start-up.
//!
//! The binary uses mimalloc (set in `main.rs`): its per-thread free lists
//! make the many small, short-lived allocations of the hot path (a request,
//! a record, a CSI message per step) far cheaper than glibc's, whose
//! `malloc` and `free` (`_int_malloc`, `malloc_consolidate`) took about a
//! third of Berth's CPU under load.
//! It is built without transparent huge pages (`no_thp`): asking the kernel
//! for them made an idle server resident at 88 MiB instead of 29 MiB.
//!
//! Loading a large store or record, and a node's complete desired set,
//! allocate far more for a moment than Berth keeps. Allocators keep what was
//! freed for reuse; an operator watching the resident size would see the peak
//! for the life of the process, so such moments end with [`release_freed`].

/// Below this many items a start-up's transient memory is not worth a trim.
pub const TRIM_FROM: usize = 10_000;

/// Returns freed heap memory to the system, from whichever allocator holds it
/// (library users and tests may run on the system allocator).
pub fn release_freed() {
    // SAFETY: mi_collect only walks mimalloc's own heaps and may be called
    // from any thread at any time.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
