//! Ids of the responses and output items the gateway writes (`resp_…`, `msg_…`, `fc_…`): a
//! per-thread seed (from the standard library's random hasher keys, one getrandom per thread)
//! and counter, mixed so that one id does not tell the next. No system call per id.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

thread_local! {
    static MINT: (Cell<Option<u64>>, Cell<u64>) = const { (Cell::new(None), Cell::new(0)) };
}

/// A new id: `prefix` and 32 hex digits.
pub fn new_id(prefix: &str) -> String {
    let (seed, n) = MINT.with(|(seed, counter)| {
        let s = seed.get().unwrap_or_else(|| {
            let s = RandomState::new().build_hasher().finish();
            seed.set(Some(s));
            s
        });
        let n = counter.get();
        counter.set(n.wrapping_add(1));
        (s, n)
    });
    format!("{prefix}{seed:016x}{:016x}", mix(seed ^ n))
}

/// splitmix64's finalizer: a bijection that spreads every input bit.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_and_never_repeat() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| new_id("resp_")).collect();
        assert_eq!(ids.len(), 1000);
        assert!(
            ids.iter()
                .all(|id| id.starts_with("resp_") && id.len() == 37)
        );
    }
}
