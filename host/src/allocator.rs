//! Giving memory back after a start-up: loading a large store or record, and
//! a node's complete desired set, allocate far more for a moment than Berth
//! keeps. glibc keeps what was freed for reuse; an operator watching the
//! resident size would see the peak for the life of the process.

/// Below this many items a start-up's transient memory is not worth a trim.
pub const TRIM_FROM: usize = 10_000;

/// Returns freed heap memory to the system (glibc only; a no-op elsewhere).
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
