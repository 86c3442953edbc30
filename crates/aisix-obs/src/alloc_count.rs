//! A counting global allocator, for measuring allocations per request (the bench harness's
//! `--count-alloc`). It wraps the real allocator and counts every allocation (a `realloc`
//! counts as one) and the bytes asked for, process-wide. It costs nothing unless a binary
//! installs it as its `#[global_allocator]`: `aisix` does only when built with the
//! `count-alloc` feature, and then `/metrics` carries the totals as
//! `aisix_alloc_calls_total` and `aisix_alloc_bytes_total`.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};

static CALLS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

/// `A`, counted.
pub struct Counting<A>(pub A);

/// Allocations (and reallocations) since the process started, and the bytes they asked for.
pub fn totals() -> (u64, u64) {
    (CALLS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed))
}

/// The totals as Prometheus text (two counters), to append to a `/metrics` page.
pub fn render() -> String {
    let (calls, bytes) = totals();
    format!(
        "# TYPE aisix_alloc_calls_total counter\naisix_alloc_calls_total {calls}\n\
         # TYPE aisix_alloc_bytes_total counter\naisix_alloc_bytes_total {bytes}\n"
    )
}

fn count(size: usize) {
    CALLS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(size as u64, Ordering::Relaxed);
}

// SAFETY: every call is passed on unchanged to `A`, which upholds `GlobalAlloc`'s contract; the
// counting touches only atomics and never allocates.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    #[test]
    fn every_allocation_and_reallocation_is_counted_with_its_size() {
        let counting = Counting(System);
        let (calls, bytes) = totals();
        let layout = Layout::from_size_align(64, 8).unwrap();
        // SAFETY: a valid non-zero layout; the pointer is freed with the layout it was
        // reallocated to.
        unsafe {
            let ptr = counting.alloc(layout);
            assert!(!ptr.is_null());
            let ptr = counting.realloc(ptr, layout, 128);
            assert!(!ptr.is_null());
            counting.dealloc(ptr, Layout::from_size_align(128, 8).unwrap());
        }
        let (after_calls, after_bytes) = totals();
        // Other tests of this process may not use this allocator: the counters are ours.
        assert_eq!(after_calls - calls, 2);
        assert_eq!(after_bytes - bytes, 64 + 128);
        assert!(render().contains(&format!("aisix_alloc_calls_total {after_calls}\n")));
    }
}
