//! Request ids: the client's `x-request-id` when it is short visible ASCII, else a new id from a
//! per-worker generator seeded once at worker start (no system call per request).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use http::HeaderValue;

/// Longest client-supplied id we accept.
pub const MAX_CLIENT_ID_LEN: usize = 128;

/// Mints ids `<16 hex seed><16 hex counter>`: unique across workers (random seed each) and
/// across restarts, sortable within a worker.
#[derive(Debug)]
pub struct RequestIds {
    seed: u64,
    // Owned by one worker in thread-per-core mode (uncontended); shared in the shared runtime.
    counter: AtomicU64,
}

impl RequestIds {
    /// Seeds from the standard library's random hasher keys (one getrandom per thread, once).
    pub fn new(worker: usize) -> Self {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_usize(worker);
        Self {
            seed: hasher.finish(),
            counter: AtomicU64::new(0),
        }
    }

    /// The id for a request: the client's if acceptable, else a fresh one.
    pub fn for_request(&self, client: Option<&HeaderValue>) -> HeaderValue {
        match client {
            Some(value) if acceptable(value.as_bytes()) => value.clone(),
            _ => self.next(),
        }
    }

    pub fn next(&self) -> HeaderValue {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut buf = [0u8; 32];
        hex(self.seed, &mut buf[..16]);
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
        assert_ne!(RequestIds::new(0).next(), RequestIds::new(1).next());
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
