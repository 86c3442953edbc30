//! Anthropic's prompt-cache breakpoints (`cache_control` on a system block, a message's content
//! block or a tool) as Converse's `cachePoint` blocks, which follow the content they close.
//!
//! The typed Messages request the translation reads has no `cache_control`, so the marks are
//! read from the body in a pass of their own, and only when the body names `cache_control` at
//! all: a request without breakpoints pays one substring search. Models Bedrock serves without
//! prompt caching refuse `cachePoint`, so for them the marks are dropped, as Anthropic's API
//! ignores a breakpoint it cannot use.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

/// Where a request's breakpoints are, by the indices of the blocks they close.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CachePoints {
    system: Vec<usize>,
    /// (message, content block) pairs.
    messages: Vec<(usize, usize)>,
    tools: Vec<usize>,
}

#[derive(Deserialize)]
struct Marks {
    #[serde(default)]
    system: Option<Listed>,
    #[serde(default)]
    messages: Vec<MessageMarks>,
    #[serde(default)]
    tools: Vec<Marked>,
}

#[derive(Deserialize)]
struct MessageMarks {
    content: Listed,
}

/// A list of blocks, or a string (which has no place for a mark; tried second, since it
/// takes anything).
#[derive(Deserialize)]
#[serde(untagged)]
enum Listed {
    Blocks(Vec<Marked>),
    Text(IgnoredAny),
}

#[derive(Deserialize)]
struct Marked {
    #[serde(default)]
    cache_control: Option<IgnoredAny>,
}

impl Listed {
    fn marked(&self) -> impl Iterator<Item = usize> + '_ {
        let blocks = match self {
            Listed::Text(_) => &[][..],
            Listed::Blocks(blocks) => &blocks[..],
        };
        blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.cache_control.is_some())
            .map(|(i, _)| i)
    }
}

impl CachePoints {
    /// The breakpoints of an Anthropic Messages `body` that `model` can take: none when the
    /// body names no `cache_control`, or the model has no prompt caching on Bedrock. A body
    /// the typed parse accepted but this one does not has none either.
    pub fn of(body: &[u8], model: &str) -> CachePoints {
        let Some(tools_too) = caching(model) else {
            return CachePoints::default();
        };
        if memchr::memmem::find(body, b"cache_control").is_none() {
            return CachePoints::default();
        }
        let Ok(marks) = serde_json::from_slice::<Marks>(body) else {
            return CachePoints::default();
        };
        CachePoints {
            system: marks
                .system
                .as_ref()
                .map(|s| s.marked().collect())
                .unwrap_or_default(),
            messages: marks
                .messages
                .iter()
                .enumerate()
                .flat_map(|(i, m)| m.content.marked().map(move |j| (i, j)))
                .collect(),
            tools: if tools_too {
                marks
                    .tools
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.cache_control.is_some())
                    .map(|(i, _)| i)
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// The system block `i` closes a cached prefix.
    pub fn after_system(&self, i: usize) -> bool {
        self.system.contains(&i)
    }

    /// Block `j` of message `i` closes a cached prefix.
    pub fn after_block(&self, i: usize, j: usize) -> bool {
        self.messages.contains(&(i, j))
    }

    /// Tool `i` closes a cached prefix.
    pub fn after_tool(&self, i: usize) -> bool {
        self.tools.contains(&i)
    }
}

/// Converse's breakpoint block.
pub fn point() -> Value {
    json!({"cachePoint": {"type": "default"}})
}

/// Whether `model` takes `cachePoint` on Bedrock, and whether in its tools too: Anthropic's
/// Claude models from 3.5 Haiku and 3.7 Sonnet on (system, messages, tools), Amazon Nova
/// (system and messages). `None`: no prompt caching (older Claude models, Llama, Mistral, …).
fn caching(model: &str) -> Option<bool> {
    const WITHOUT: &[&str] = &[
        "claude-instant",
        "claude-v2",
        "claude-3-haiku",
        "claude-3-sonnet",
        "claude-3-opus",
        "claude-3-5-sonnet",
    ];
    if model.contains("anthropic.claude") {
        return (!WITHOUT.iter().any(|old| model.contains(old))).then_some(true);
    }
    model.contains("amazon.nova").then_some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SONNET_4: &str = "us.anthropic.claude-sonnet-4-20250514-v1:0";

    #[test]
    fn marks_are_read_from_system_messages_and_tools() {
        let body = br#"{"model":"m","max_tokens":5,
            "system":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}],
            "messages":[{"role":"user","content":"plain"},
                        {"role":"assistant","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl":"5m"}}]},
                        {"role":"user","content":[{"type":"text","text":"y"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="},"cache_control":{"type":"ephemeral"}}]}],
            "tools":[{"name":"t","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]}"#;
        let points = CachePoints::of(body, SONNET_4);
        assert_eq!(points.system, vec![1]);
        assert_eq!(points.messages, vec![(1, 0), (2, 1)]);
        assert_eq!(points.tools, vec![0]);
    }

    #[test]
    fn a_model_without_prompt_caching_gets_no_marks_and_nova_none_in_tools() {
        let body = br#"{"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}],
            "messages":[],"tools":[{"name":"t","cache_control":{"type":"ephemeral"}}]}"#;
        for old in [
            "anthropic.claude-3-5-sonnet-20240620-v1:0",
            "anthropic.claude-3-haiku-20240307-v1:0",
            "meta.llama3-70b-instruct-v1:0",
        ] {
            assert_eq!(CachePoints::of(body, old), CachePoints::default(), "{old}");
        }
        let nova = CachePoints::of(body, "us.amazon.nova-pro-v1:0");
        assert_eq!((nova.system, nova.tools), (vec![0], vec![]));
        let haiku = CachePoints::of(body, "anthropic.claude-3-5-haiku-20241022-v1:0");
        assert_eq!(haiku.tools, vec![0]);
    }

    #[test]
    fn a_body_without_cache_control_is_not_parsed_again() {
        // Not JSON at all: only the substring search runs.
        assert_eq!(
            CachePoints::of(b"not json", SONNET_4),
            CachePoints::default()
        );
    }
}
