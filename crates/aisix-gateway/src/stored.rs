//! The Responses API's stored responses on a translated path: each answer kept with the
//! conversation that led to it (its input items, the history included) under its id, for the
//! API key that made it, until its TTL passes or the store's bounds (entries, bytes) push the
//! oldest out. Looked up for `previous_response_id`, `GET /v1/responses/{id}` (and its
//! `input_items`) and `DELETE`. In this process's memory; a request that stores nothing (native
//! relays, `store: false`, every other endpoint) never touches it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use aisix_config::ResponsesStoreConfig;
use bytes::Bytes;
use http::{Method, Response, header};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::error::{ErrorKind, GatewayError, echo};
use crate::relay::body::GatewayBody;

/// The store a Responses request reads and writes, and the API key it does so for.
#[derive(Debug, Clone)]
pub(crate) struct Keeper {
    pub store: Arc<Store>,
    /// Which provider key created each response a native key answered: a second store of the
    /// same bounds, each entry holding the provider key's name.
    pub pins: Arc<Store>,
    pub owner: Arc<str>,
}

impl Keeper {
    /// Remembers that the provider key `provider` created the response `id`.
    pub(crate) fn pin(&self, id: &str, provider: &str) {
        if id.is_empty() {
            return;
        }
        self.pins.put(
            id.to_owned(),
            Stored {
                owner: Arc::clone(&self.owner),
                response: Bytes::copy_from_slice(provider.as_bytes()),
                input: Bytes::new(),
            },
        );
    }

    /// The provider key that created the response `id` for this caller, if it is remembered.
    pub(crate) fn pinned(&self, id: &str) -> Option<Bytes> {
        self.pins.get(id, &self.owner).map(|pin| pin.response)
    }
}

/// A whole native answer's pin, taken when its body has passed: the response's id is read
/// from the answer's first bytes.
#[derive(Debug)]
pub(crate) struct Pin {
    pub keeper: Keeper,
    pub provider: Arc<str>,
}

impl Pin {
    /// Pins the response whose answer begins with `head` (its top-level `id` comes first).
    pub(crate) fn answered(self, head: &[u8]) {
        let Some(at) = memchr::memmem::find(head, b"\"id\"") else {
            return;
        };
        if let crate::wire::chunk::Value::String(start, end) =
            crate::wire::chunk::string_value_after_key(head, at + 4)
            && let Ok(id) = std::str::from_utf8(&head[start + 1..end - 1])
        {
            self.keeper.pin(id, &self.provider);
        }
    }
}

/// The 404 for a response id that is not (or no longer) kept for the caller, the id echoed cut
/// to 256 bytes.
pub(crate) fn not_found(id: &str, param: Option<&'static str>) -> GatewayError {
    let what = if param.is_some() {
        "Previous response"
    } else {
        "Response"
    };
    let error = GatewayError::new(
        ErrorKind::ResponseNotFound,
        format!("{what} with id '{}' not found.", echo(id)),
    );
    match param {
        Some(param) => error.with_param(param),
        None => error,
    }
}

/// `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}` and
/// `GET /v1/responses/{id}/input_items` (`items`) for the caller `keeper.owner`.
pub(crate) fn answer(
    keeper: &Keeper,
    method: &Method,
    id: &str,
    items: bool,
    query: Option<&str>,
) -> Result<Response<GatewayBody>, GatewayError> {
    if *method == Method::DELETE {
        if !keeper.store.delete(id, &keeper.owner) {
            return Err(not_found(id, None));
        }
        return Ok(json_response(
            json!({"id": id, "object": "response", "deleted": true})
                .to_string()
                .into(),
        ));
    }
    let stored = keeper
        .store
        .get(id, &keeper.owner)
        .ok_or_else(|| not_found(id, None))?;
    if !items {
        return Ok(json_response(stored.response));
    }
    let mut data: Vec<Value> = serde_json::from_slice(&stored.input).unwrap_or_default();
    let page = Page::from_query(query)?;
    if page.descending {
        data.reverse();
    }
    if let Some(after) = &page.after {
        let at = data
            .iter()
            .position(|item| item.get("id").and_then(Value::as_str) == Some(after));
        data.drain(..at.map_or(data.len(), |at| at + 1));
    }
    let has_more = data.len() > page.limit;
    data.truncate(page.limit);
    let id_of = |item: Option<&Value>| item.and_then(|i| i.get("id")).cloned();
    let list = json!({
        "object": "list",
        "data": data,
        "first_id": id_of(data.first()),
        "last_id": id_of(data.last()),
        "has_more": has_more,
    });
    Ok(json_response(list.to_string().into()))
}

/// `input_items`' paging: `order` (`desc` unless `asc`), `limit` (1 to 100, 20 unless given),
/// `after` (an item id).
struct Page {
    descending: bool,
    limit: usize,
    after: Option<String>,
}

impl Page {
    fn from_query(query: Option<&str>) -> Result<Page, GatewayError> {
        let mut page = Page {
            descending: true,
            limit: 20,
            after: None,
        };
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "order" => page.descending = value != "asc",
                "limit" => {
                    page.limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=100).contains(n))
                        .ok_or_else(|| {
                            GatewayError::new(
                                ErrorKind::InvalidRequest,
                                "'limit' must be a whole number from 1 to 100.",
                            )
                            .with_param("limit")
                        })?;
                }
                "after" => page.after = Some(value.to_owned()),
                _ => {}
            }
        }
        Ok(page)
    }
}

fn json_response(body: Bytes) -> Response<GatewayBody> {
    let mut response = Response::new(GatewayBody::full(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// One stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The API key (its display name) that made it: no other may read it.
    pub owner: Arc<str>,
    /// The response object, as the client got it.
    pub response: Bytes,
    /// Its input items, the conversation before it included, as a JSON array (each with an id).
    pub input: Bytes,
}

impl Stored {
    fn size(&self) -> usize {
        self.response.len() + self.input.len()
    }
}

/// The store of one process.
// shared: a response stored by one worker is read by whichever worker the next turn reaches.
#[derive(Debug)]
pub struct Store {
    limits: ResponsesStoreConfig,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, (Stored, Instant)>,
    /// Ids in the order they were stored (and so expire); a deleted one stays until its turn.
    order: VecDeque<String>,
    bytes: usize,
}

impl Store {
    pub fn new(limits: ResponsesStoreConfig) -> Self {
        Self {
            limits,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The lock; a holder that panicked left the maps consistent (every change is one step).
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `stored` under `id`, pushing out what the bounds need. One too large for the
    /// store is not kept.
    pub fn put(&self, id: String, stored: Stored) {
        let size = stored.size();
        if self.limits.max_entries == 0 || size > self.limits.max_bytes {
            return;
        }
        let now = Instant::now();
        let mut inner = self.inner();
        inner.expire(now, self.limits.ttl);
        if let Some((old, _)) = inner.entries.remove(&id) {
            inner.bytes -= old.size();
        }
        while inner.entries.len() >= self.limits.max_entries
            || inner.bytes + size > self.limits.max_bytes
        {
            if !inner.pop_oldest() {
                break;
            }
        }
        inner.bytes += size;
        inner.order.push_back(id.clone());
        inner.entries.insert(id, (stored, now));
    }

    /// The response `id` if it is still kept and `owner` made it.
    pub fn get(&self, id: &str, owner: &str) -> Option<Stored> {
        let now = Instant::now();
        let inner = self.inner();
        let (stored, at) = inner.entries.get(id)?;
        (now.duration_since(*at) < self.limits.ttl && &*stored.owner == owner)
            .then(|| stored.clone())
    }

    /// Forgets the response `id` that `owner` made; whether there was one.
    pub fn delete(&self, id: &str, owner: &str) -> bool {
        if self.get(id, owner).is_none() {
            return false;
        }
        let mut inner = self.inner();
        match inner.entries.remove(id) {
            Some((old, _)) => {
                inner.bytes -= old.size();
                true
            }
            None => false,
        }
    }
}

impl Inner {
    /// Drops the entries older than `ttl`.
    fn expire(&mut self, now: Instant, ttl: std::time::Duration) {
        while let Some(id) = self.order.front() {
            let expired = match self.entries.get(id) {
                Some((_, at)) => now.duration_since(*at) >= ttl,
                // Deleted: its place in the order goes too.
                None => true,
            };
            if !expired {
                break;
            }
            self.pop_oldest();
        }
    }

    /// Drops the oldest entry; false when there is none.
    fn pop_oldest(&mut self) -> bool {
        let Some(id) = self.order.pop_front() else {
            return false;
        };
        if let Some((old, _)) = self.entries.remove(&id) {
            self.bytes -= old.size();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn stored(owner: &str, size: usize) -> Stored {
        Stored {
            owner: owner.into(),
            response: Bytes::from(vec![b'r'; size]),
            input: Bytes::from_static(b"[]"),
        }
    }

    fn store(max_entries: usize, max_bytes: usize) -> Store {
        Store::new(ResponsesStoreConfig {
            max_entries,
            max_bytes,
            ttl: Duration::from_secs(60),
        })
    }

    #[test]
    fn a_stored_response_is_read_only_by_the_key_that_made_it() {
        let store = store(10, 1000);
        store.put("resp_1".into(), stored("alice", 10));
        assert!(store.get("resp_1", "alice").is_some());
        assert!(store.get("resp_1", "bob").is_none());
        assert!(!store.delete("resp_1", "bob"));
        assert!(store.delete("resp_1", "alice"));
        assert!(store.get("resp_1", "alice").is_none());
        assert!(!store.delete("resp_1", "alice"));
    }

    #[test]
    fn the_oldest_go_first_when_entries_or_bytes_run_out() {
        let store = store(2, 1000);
        for id in ["a", "b", "c"] {
            store.put(id.into(), stored("k", 10));
        }
        assert!(store.get("a", "k").is_none());
        assert!(store.get("b", "k").is_some() && store.get("c", "k").is_some());

        let store = self::store(100, 100);
        store.put("a".into(), stored("k", 50));
        store.put("b".into(), stored("k", 40));
        store.put("c".into(), stored("k", 40));
        assert!(store.get("a", "k").is_none(), "bytes pushed the oldest out");
        assert!(store.get("c", "k").is_some());
        store.put("huge".into(), stored("k", 500));
        assert!(
            store.get("huge", "k").is_none(),
            "larger than the store: not kept"
        );
        assert!(
            store.get("c", "k").is_some(),
            "and nothing pushed out for it"
        );
        assert!(self::store(0, 100).get("x", "k").is_none());
    }

    #[test]
    fn a_native_answer_pins_its_id_to_the_provider_key_for_its_caller() {
        let keeper = Keeper {
            store: Arc::new(store(10, 1000)),
            pins: Arc::new(store(10, 1000)),
            owner: "alice".into(),
        };
        let pin = Pin {
            keeper: keeper.clone(),
            provider: "key-a".into(),
        };
        pin.answered(br#"{"id" : "resp_7","object":"response","output":[{"id":"msg_1"}]}"#);
        assert_eq!(keeper.pinned("resp_7").as_deref(), Some(&b"key-a"[..]));
        assert_eq!(keeper.pinned("msg_1"), None);
        let stranger = Keeper {
            owner: "bob".into(),
            ..keeper.clone()
        };
        assert_eq!(stranger.pinned("resp_7"), None);
        Pin {
            keeper: keeper.clone(),
            provider: "key-a".into(),
        }
        .answered(b"{\"error\":");
        assert!(
            keeper.store.get("resp_7", "alice").is_none(),
            "pins are not stored answers"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_past_its_ttl_is_gone() {
        let store = store(10, 1000);
        store.put("a".into(), stored("k", 10));
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(store.get("a", "k").is_some());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(store.get("a", "k").is_none());
        store.put("b".into(), stored("k", 10));
        assert_eq!(
            store.inner().entries.len(),
            1,
            "the expired one left at the next put"
        );
    }
}
