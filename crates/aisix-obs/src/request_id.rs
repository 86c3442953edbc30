//! Request ids: the client's `x-request-id` when it is short visible ASCII, else a new id from a
//! per-thread generator seeded once, on the thread's first id (no system call per request, and
//! no counter shared between the shared runtime's threads).

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use http::{HeaderName, HeaderValue};

/// The header that carries the id, both ways. A static name: naming a header by a string costs
/// an allocation each time.
pub static HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client-supplied id we accept.
pub const MAX_CLIENT_ID_LEN: usize = 128;

/// Mints ids `<16 hex seed><16 hex counter>`: unique across threads (a random seed each) and
/// across restarts, sortable within a thread. A thread-per-core worker is one thread; each thread
/// of the shared runtime mints its own, so no thread waits on another's counter.
#[derive(Debug)]
pub struct RequestIds {
    worker: usize,
}

/// One thread's seed and counter.
struct Mint {
    seed: Cell<Option<u64>>,
    counter: Cell<u64>,
}

thread_local! {
    static MINT: Mint = const {
        Mint {
            seed: Cell::new(None),
            counter: Cell::new(0),
        }
    };
}

impl RequestIds {
    /// A generator for `worker`'s requests; the worker index is mixed into each thread's seed.
    pub fn new(worker: usize) -> Self {
        Self { worker }
    }

    /// The id for a request: the client's if acceptable, else a fresh one.
    pub fn for_request(&self, client: Option<&HeaderValue>) -> HeaderValue {
        match client {
            // Copied, not cloned: a clone would be a slice of the connection's read buffer and
            // keep it alive for the request's life (benches/PROFILE.md, "After").
            Some(value) if acceptable(value.as_bytes()) => {
                HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| self.next())
            }
            _ => self.next(),
        }
    }

    pub fn next(&self) -> HeaderValue {
        let (seed, n) = MINT.with(|mint| {
            // Seeded from the standard library's random hasher keys (one getrandom per thread).
            let seed = mint.seed.get().unwrap_or_else(|| {
                let mut hasher = RandomState::new().build_hasher();
                hasher.write_usize(self.worker);
                let seed = hasher.finish();
                mint.seed.set(Some(seed));
                seed
            });
            let n = mint.counter.get();
            mint.counter.set(n.wrapping_add(1));
            (seed, n)
        });
        let mut buf = [0u8; 32];
        hex(seed, &mut buf[..16]);
        hex(n, &mut buf[16..]);
        HeaderValue::from_bytes(&buf).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
    }
}

fn acceptable(id: &[u8]) -> bool {
    !id.is_empty() && id.len() <= MAX_CLIENT_ID_LEN && id.iter().all(|b| (0x21..=0x7e).contains(b))
}

fn hex(value: u64, out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in out.iter_mut().enumerate() {
        let shift = 60 - 4 * i;
        *byte = DIGITS[((value >> shift) & 0xf) as usize];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_unique_hex() {
        let ids = RequestIds::new(0);
        let a = ids.next();
        let b = ids.next();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.as_bytes().iter().all(u8::is_ascii_hexdigit));
    }

    #[test]
    fn workers_do_not_collide() {
        let on_thread = |worker| std::thread::spawn(move || RequestIds::new(worker).next());
        let (a, b) = (on_thread(0), on_thread(1));
        assert_ne!(a.join().unwrap(), b.join().unwrap());
    }

    /// The shared runtime's threads share one generator: each thread mints from its own seed
    /// and counter, and no id repeats.
    #[test]
    fn threads_sharing_one_generator_mint_from_their_own_seed_and_never_repeat() {
        let ids = std::sync::Arc::new(RequestIds::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let ids = ids.clone();
                std::thread::spawn(move || (0..100).map(|_| ids.next()).collect::<Vec<_>>())
            })
            .collect();
        let minted: Vec<Vec<HeaderValue>> =
            threads.into_iter().map(|t| t.join().unwrap()).collect();
        let seed = |id: &HeaderValue| id.as_bytes()[..16].to_vec();
        for per_thread in &minted {
            assert!(per_thread.iter().all(|id| seed(id) == seed(&per_thread[0])));
            assert!(
                per_thread
                    .windows(2)
                    .all(|w| w[0].as_bytes() < w[1].as_bytes()),
                "sortable within a thread"
            );
        }
        let seeds: std::collections::HashSet<_> = minted.iter().map(|t| seed(&t[0])).collect();
        assert_eq!(seeds.len(), 4, "one seed per thread");
        let all: std::collections::HashSet<_> = minted.iter().flatten().collect();
        assert_eq!(all.len(), 400);
    }

    #[test]
    fn acceptable_client_ids_are_kept_and_others_replaced() {
        let ids = RequestIds::new(0);
        let good = HeaderValue::from_static("trace-123_ABC");
        assert_eq!(ids.for_request(Some(&good)), good);
        let spaced = HeaderValue::from_static("has space");
        assert_ne!(ids.for_request(Some(&spaced)), spaced);
        let long = HeaderValue::from_str(&"x".repeat(MAX_CLIENT_ID_LEN + 1)).unwrap();
        assert_ne!(ids.for_request(Some(&long)), long);
        assert_eq!(ids.for_request(None).len(), 32);
    }
}
