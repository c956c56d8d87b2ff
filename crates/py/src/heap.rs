//! Counts the heap allocations of the Rust code in this extension (the simulator's and the
//! binding's; Python's own allocations do not come through here). `tests/test_sim_cost.py`
//! reads the counts before and after a run and budgets them per delivered packet: a count,
//! unlike a time, is the same on every machine and every run.
//!
//! The cost is one relaxed atomic add per allocation on top of the system allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// New blocks (`alloc` and `alloc_zeroed`) and resized ones (`realloc`, e.g. a `Vec`
/// growing), since the extension was loaded.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static REALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counted.
pub struct CountingAllocator;

// SAFETY: every call is passed on unchanged to `System`, which upholds the contract.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        REALLOCATIONS.fetch_add(1, Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

/// `(allocations, reallocations)` so far.
pub fn counts() -> (u64, u64) {
    (ALLOCATIONS.load(Relaxed), REALLOCATIONS.load(Relaxed))
}
