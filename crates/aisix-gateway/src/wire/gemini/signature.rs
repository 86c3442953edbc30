//! Gemini's thought signatures, carried through the client in the tool call's id.
//!
//! A thinking Gemini model puts an opaque `thoughtSignature` on the part of each function call
//! it makes (on the first of parallel calls), and Gemini 3 refuses a later request whose
//! history gives that call back without it (400, "Function call is missing a
//! thought_signature"). Neither client dialect has a place for it, but both give a call's id
//! back verbatim with its result, so the signature rides in the id: `<id>__thought__<sig>`,
//! the signature's base64 written URL-safe and unpadded, so that the id stays within the
//! `[A-Za-z0-9_-]` Anthropic's ids allow. A call without a signature keeps its plain id.

/// What separates a call's own id from its signature.
const MARK: &str = "__thought__";

/// The id a client gets for call `id` that carried `signature` (standard base64).
pub fn with_signature(id: String, signature: Option<&str>) -> String {
    let Some(signature) = signature.filter(|s| !s.is_empty()) else {
        return id;
    };
    let mut out = id;
    out.reserve(MARK.len().saturating_add(signature.len()));
    out.push_str(MARK);
    out.extend(signature.chars().filter(|c| *c != '=').map(|c| match c {
        '+' => '-',
        '/' => '_',
        c => c,
    }));
    out
}

/// The signature (standard base64, padded) a client's call id carries, if any.
pub fn of(id: &str) -> Option<String> {
    let (_, carried) = id.split_once(MARK)?;
    if carried.is_empty() {
        return None;
    }
    let mut signature: String = carried
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    while !signature.len().is_multiple_of(4) {
        signature.push('=');
    }
    Some(signature)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_rides_in_the_id_within_anthropic_s_alphabet_and_comes_back_whole() {
        for signature in ["CiQB+/8=", "AAAA", "a+b/c", "Zm9vYmFyYg=="] {
            let id = with_signature("call_s-1_0".to_owned(), Some(signature));
            assert!(id.starts_with("call_s-1_0__thought__"), "{id}");
            assert!(
                id.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
                "{id}"
            );
            let back = of(&id).unwrap();
            assert_eq!(back.trim_end_matches('='), signature.trim_end_matches('='));
            assert!(back.len().is_multiple_of(4), "{back}");
        }
    }

    #[test]
    fn a_call_without_a_signature_keeps_its_id_and_gives_none() {
        assert_eq!(with_signature("call_1".to_owned(), None), "call_1");
        assert_eq!(with_signature("call_1".to_owned(), Some("")), "call_1");
        assert_eq!(of("call_1"), None);
        assert_eq!(of("toolu_01A09q90qw90lq917835lq9"), None);
    }
}
