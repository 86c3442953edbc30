//! Client API keys as SHA-256 digests: the plaintext is hashed once at load and never kept, and
//! a digest never prints.

use std::fmt;

use sha2::{Digest, Sha256};

/// The SHA-256 of a client API key. `Debug` never shows the bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyHash(pub [u8; 32]);

impl KeyHash {
    /// Parses the 64-character hex form (either case) that `key_hash` takes.
    pub fn from_hex(hex: &str) -> Option<Self> {
        let bytes = hex.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            let (hi, lo) = (hex_digit(pair[0])?, hex_digit(pair[1])?);
            *byte = (hi << 4) | lo;
        }
        Some(Self(out))
    }
}

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyHash(***)")
    }
}

/// The SHA-256 of `plaintext`, as a client's key is looked up: one hash per request.
pub fn hash_key(plaintext: &str) -> KeyHash {
    KeyHash(Sha256::digest(plaintext.as_bytes()).into())
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SHA-256("test"), the example digest in the resources format's documentation.
    const TEST_HEX: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn hash_key_is_sha256_of_the_plaintext() {
        assert_eq!(hash_key("test"), KeyHash::from_hex(TEST_HEX).unwrap());
    }

    #[test]
    fn from_hex_accepts_either_case() {
        assert_eq!(
            KeyHash::from_hex(&TEST_HEX.to_uppercase()),
            KeyHash::from_hex(TEST_HEX)
        );
    }

    #[test]
    fn from_hex_rejects_wrong_length_and_non_hex() {
        assert_eq!(KeyHash::from_hex(&TEST_HEX[..62]), None);
        assert_eq!(KeyHash::from_hex(&format!("{TEST_HEX}00")), None);
        assert_eq!(KeyHash::from_hex(&TEST_HEX.replace('9', "g")), None);
        // 64 bytes, but not 64 ASCII characters.
        assert_eq!(KeyHash::from_hex(&"é".repeat(32)), None);
    }

    #[test]
    fn key_hash_debug_hides_the_bytes() {
        assert_eq!(format!("{:?}", hash_key("test")), "KeyHash(***)");
    }
}
