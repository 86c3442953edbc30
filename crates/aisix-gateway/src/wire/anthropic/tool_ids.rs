//! Tool call ids between the dialects, per request. Anthropic accepts ids of `[A-Za-z0-9_-]+`;
//! OpenAI-compatible servers make others (`functions.get:0`). An id Anthropic accepts is sent
//! as it is; any other is sanitized (other characters become `_`) and, when that collides with
//! another id of the request, given the first free `-2`, `-3`… suffix. The table holds every
//! id it changed, so each maps back to the client's.
//!
//! Cost: nothing is allocated for a request whose ids Anthropic accepts (the common case).

use std::borrow::Cow;

/// The changed ids of one request: (the client's id, the id sent upstream).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolIds {
    changed: Vec<(String, String)>,
    /// Every id the request uses as it is: no sanitized id may take one.
    kept: Vec<String>,
}

impl ToolIds {
    /// The table for a request whose tool call ids (calls and results alike, in any order,
    /// repeats allowed) are `ids`.
    pub fn new<'a>(ids: impl Iterator<Item = &'a str> + Clone) -> Self {
        let mut table = ToolIds::default();
        if ids.clone().all(accepted) {
            return table;
        }
        table.kept = ids
            .clone()
            .filter(|id| accepted(id))
            .map(str::to_owned)
            .collect();
        for id in ids.filter(|id| !accepted(id)) {
            if table.changed.iter().any(|(original, _)| original == id) {
                continue;
            }
            let base = sanitized(id);
            let mut sent = base.clone();
            let mut n = 2u32;
            while table.taken(&sent) {
                sent = format!("{base}-{n}");
                n = n.saturating_add(1);
            }
            table.changed.push((id.to_owned(), sent));
        }
        table
    }

    fn taken(&self, id: &str) -> bool {
        self.kept.iter().any(|k| k == id) || self.changed.iter().any(|(_, sent)| sent == id)
    }

    /// The id to send upstream for the client's `id`.
    pub fn upstream<'a>(&'a self, id: &'a str) -> Cow<'a, str> {
        match self.changed.iter().find(|(original, _)| original == id) {
            Some((_, sent)) => Cow::Borrowed(sent),
            // Not in the request's table (it was built from every id): sanitized alone.
            None if !accepted(id) => Cow::Owned(sanitized(id)),
            None => Cow::Borrowed(id),
        }
    }

    /// The client's id for the id sent upstream as `sent`.
    pub fn client<'a>(&'a self, sent: &'a str) -> &'a str {
        self.changed
            .iter()
            .find(|(_, s)| s == sent)
            .map_or(sent, |(original, _)| original)
    }

    /// Whether every id goes upstream as the client sent it.
    pub fn is_identity(&self) -> bool {
        self.changed.is_empty()
    }
}

/// Whether Anthropic accepts `id` as a tool_use id.
pub fn accepted(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn sanitized(id: &str) -> String {
    if id.is_empty() {
        return "_".to_owned();
    }
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_ids_are_kept_without_a_table() {
        let ids = ToolIds::new(["call_1", "toolu_01-A", "call_1"].into_iter());
        assert!(ids.is_identity());
        assert_eq!(ids.upstream("call_1"), "call_1");
        assert_eq!(ids.client("call_1"), "call_1");
    }

    #[test]
    fn sanitized_ids_never_collide_and_map_back() {
        let all = [
            "call_1",
            "call.1",
            "call:1",
            "call.1",
            "",
            "_",
            "functions.get:0",
        ];
        let ids = ToolIds::new(all.into_iter());
        let sent: Vec<String> = all.iter().map(|id| ids.upstream(id).into_owned()).collect();
        assert_eq!(
            sent,
            [
                "call_1",
                "call_1-2",
                "call_1-3",
                "call_1-2",
                "_-2",
                "_",
                "functions_get_0"
            ]
        );
        for (original, sent) in all.iter().zip(&sent) {
            assert!(accepted(sent), "{sent}");
            assert_eq!(ids.client(sent), *original);
        }
    }
}
