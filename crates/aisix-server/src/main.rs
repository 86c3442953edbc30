//! The `aisix` binary; everything but the allocator lives in the library.

#[cfg(all(target_os = "linux", not(feature = "count-alloc")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The `count-alloc` feature (the bench harness's `--count-alloc`): the same allocator, every
/// allocation counted, the totals on `/metrics` (`aisix_obs::alloc_count`).
#[cfg(all(target_os = "linux", feature = "count-alloc"))]
#[global_allocator]
static GLOBAL: aisix_obs::alloc_count::Counting<tikv_jemallocator::Jemalloc> =
    aisix_obs::alloc_count::Counting(tikv_jemallocator::Jemalloc);

/// jemalloc's options, read once before `main`: a background thread returns freed memory to
/// the system on its own, and dirty and muzzy pages are kept at most 5 s each (jemalloc's
/// default is 10 s and only on allocator activity), so after a burst of large bodies the
/// process's RSS falls back toward its idle figure within seconds even when it goes quiet.
/// `_RJEM_MALLOC_CONF` in the environment still overrides any of these (README, "Memory").
#[cfg(target_os = "linux")]
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: Option<&'static std::ffi::c_char> =
    // SAFETY: a NUL-terminated string of 'static lifetime, only ever read.
    Some(unsafe {
        &*c"background_thread:true,dirty_decay_ms:5000,muzzy_decay_ms:5000".as_ptr()
    });

fn main() -> std::process::ExitCode {
    aisix_server::main()
}
