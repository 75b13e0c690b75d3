//! A bump allocator for guests.
//!
//! Berth runs every decision in a fresh instance and throws its memory away
//! afterwards, so freeing is wasted work: with this allocator `free` does
//! nothing and `realloc` of the newest block grows it in place. Passing a
//! thousand candidate nodes costs thousands of allocations on the way in and
//! as many frees on the way out; here each is a few instructions.
//!
//! Memory only grows, so a policy that allocates and frees in a long loop
//! meets its memory limit sooner. Turn the `bump-allocator` feature off to use
//! the standard allocator instead.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;

/// The first arena fits in the free space of a guest's initial memory, so a
/// small decision never grows memory (growing costs the host an `mprotect`).
const FIRST_ARENA: usize = 16 * 1024;
/// Later arenas double, up to this size (or the request, when larger).
const MAX_ARENA: usize = 4 << 20;

/// Bump allocation in arenas taken from the C library's allocator, which
/// owns the heap; nothing is ever given back.
pub struct BumpAllocator {
    /// (next free byte, end of the current arena, size of the next arena).
    state: UnsafeCell<(usize, usize, usize)>,
}

// SAFETY: wasm32-wasip2 guests run on a single thread.
unsafe impl Sync for BumpAllocator {}

impl BumpAllocator {
    pub const fn new() -> Self {
        BumpAllocator {
            state: UnsafeCell::new((0, 0, FIRST_ARENA)),
        }
    }
}

impl Default for BumpAllocator {
    fn default() -> Self {
        Self::new()
    }
}

unsafe impl GlobalAlloc for BumpAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: single-threaded, and no reference to the state outlives this call.
        let (next, end, arena) = unsafe { &mut *self.state.get() };
        let align = layout.align();
        let start = (*next + align - 1) & !(align - 1);
        if let Some(stop) = start.checked_add(layout.size())
            && stop <= *end
            && *end != 0
        {
            *next = stop;
            return start as *mut u8;
        }
        let size = (*arena).max(layout.size() + align);
        // SAFETY: `size` is non-zero and the alignment is a power of two.
        let base = unsafe { std::alloc::System.alloc(Layout::from_size_align_unchecked(size, 16)) } as usize;
        if base == 0 {
            return core::ptr::null_mut();
        }
        *arena = (*arena * 2).min(MAX_ARENA);
        let start = (base + align - 1) & !(align - 1);
        *next = start + layout.size();
        *end = base + size;
        start as *mut u8
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let (next, end, _) = unsafe { &mut *self.state.get() };
        let addr = ptr as usize;
        // The newest block grows or shrinks in place.
        if addr + layout.size() == *next && addr + new_size <= *end {
            *next = addr + new_size;
            return ptr;
        }
        // SAFETY: the caller guarantees `layout` is valid with the new size.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller of the two sizes and do not overlap.
            unsafe { core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Natively the arenas come from the system allocator too, so the
    // allocator can be exercised here (its memory is leaked, by design).
    #[test]
    fn bumps_aligns_and_grows_in_place() {
        let a = BumpAllocator::new();
        unsafe {
            let l8 = Layout::from_size_align(10, 8).unwrap();
            let p = a.alloc(l8);
            assert_eq!(p as usize % 8, 0);
            let q = a.alloc(Layout::from_size_align(4, 64).unwrap());
            assert_eq!(q as usize % 64, 0);
            assert!(q as usize >= p as usize + 10);
            // The newest block grows in place; an older one moves, keeping its bytes.
            let r = a.realloc(q, Layout::from_size_align(4, 64).unwrap(), 100);
            assert_eq!(r, q);
            *p = 42;
            let moved = a.realloc(p, l8, 5000);
            assert_ne!(moved, p);
            assert_eq!(*moved, 42);
            // Larger than any arena: a dedicated one.
            let big = a.alloc(Layout::from_size_align(8 << 20, 8).unwrap());
            assert!(!big.is_null());
            *big.add((8 << 20) - 1) = 1;
        }
    }
}
