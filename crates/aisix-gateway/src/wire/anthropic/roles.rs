//! `system` and `developer` turns inside an Anthropic request's `messages`, which Anthropic's
//! API refuses (Claude Code sends one for a model name it does not know): found by a byte scan,
//! and for an Anthropic upstream hoisted into the top-level `system`, in order. A body without
//! one is left as it came.
//!
//! Cost on a relay: one `memmem` pass over the body for `"role"`; a body is parsed and
//! written again only when a turn's role is `system` or `developer`.

use memchr::memmem;
use serde_json::{Map, Value, json};

/// `body` with its `system` and `developer` turns moved to the end of its top-level `system`
/// (after the system prompt it already has), or `None` when it has none (or is not a JSON
/// object with a `messages` list, which the upstream judges).
pub fn hoisted(body: &[u8]) -> Option<Vec<u8>> {
    if !has_instruction_turn(body) {
        return None;
    }
    let mut request: Map<String, Value> = serde_json::from_slice(body).ok()?;
    let Some(Value::Array(messages)) = request.get_mut("messages") else {
        return None;
    };
    let (turns, rest): (Vec<Value>, Vec<Value>) =
        std::mem::take(messages).into_iter().partition(|m| {
            matches!(
                m.get("role").and_then(Value::as_str),
                Some("system" | "developer")
            )
        });
    if turns.is_empty() {
        return None;
    }
    *messages = rest;
    let mut system = Vec::new();
    let before = request.remove("system").unwrap_or(Value::Null);
    for content in std::iter::once(before).chain(
        turns
            .into_iter()
            .map(|mut t| t.get_mut("content").map(Value::take).unwrap_or_default()),
    ) {
        match content {
            Value::String(text) if !text.is_empty() => {
                system.push(json!({"type": "text", "text": text}))
            }
            Value::Array(blocks) => system.extend(blocks),
            // Anything else is the upstream's to refuse, as the client sent it.
            Value::String(_) | Value::Null => {}
            other => system.push(other),
        }
    }
    request.insert("system".to_owned(), Value::Array(system));
    serde_json::to_vec(&request).ok()
}

/// Whether some `"role"` key of `body` has the value `"system"` or `"developer"`. A key of a
/// nested object (a tool's input) may match too; [`hoisted`] then finds no turn to move.
fn has_instruction_turn(body: &[u8]) -> bool {
    memmem::find_iter(body, b"\"role\"").any(|at| {
        let rest = skip_space(body.get(at.saturating_add(6)..).unwrap_or_default());
        let Some(rest) = rest.strip_prefix(b":") else {
            return false;
        };
        let rest = skip_space(rest);
        rest.starts_with(b"\"system\"") || rest.starts_with(b"\"developer\"")
    })
}

fn skip_space(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    bytes.get(start..).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hoist(body: Value) -> Option<Value> {
        hoisted(body.to_string().as_bytes()).map(|b| serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn a_body_without_instruction_turns_is_left_alone() {
        let plain = json!({"model": "m", "system": "Be brief.", "max_tokens": 5,
            "messages": [{"role": "user", "content": "the role \"system\" is quoted"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"role": "user"}}]}]});
        assert_eq!(hoist(plain), None);
        assert_eq!(hoisted(b"not json \"role\": \"system\""), None);
        // A nested key matches the scan, and the parse finds no turn to move.
        let nested = json!({"model": "m", "messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "f", "input": {"role": "system"}}]}]});
        assert_eq!(hoist(nested), None);
    }

    #[test]
    fn system_and_developer_turns_follow_the_system_prompt_in_order() {
        let out = hoist(json!({"model": "m", "max_tokens": 5, "x_future": [1],
            "system": [{"type": "text", "text": "first", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "hi"},
                {"role" : "system", "content": "second"},
                {"role": "assistant", "content": "hello"},
                {"role": "developer", "content": [{"type": "text", "text": "third"}]},
                {"role": "user", "content": "again"}]}))
        .unwrap();
        assert_eq!(
            out["system"],
            json!([
            {"type": "text", "text": "first", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "second"},
            {"type": "text", "text": "third"}])
        );
        assert_eq!(
            out["messages"],
            json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "again"}])
        );
        assert_eq!(out["x_future"], json!([1]), "unknown fields stay");

        let string_prompt = hoist(json!({"model": "m", "system": "one",
            "messages": [{"role": "system", "content": "two"}, {"role": "user", "content": "hi"}]}))
        .unwrap();
        assert_eq!(
            string_prompt["system"],
            json!([
            {"type": "text", "text": "one"}, {"type": "text", "text": "two"}])
        );
    }
}
