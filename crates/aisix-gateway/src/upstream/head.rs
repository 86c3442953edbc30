//! The headers of an upstream request. Most requests to one destination carry the same ones:
//! the gateway's own (`Content-Type`, `Accept`, `User-Agent`), the destination's (a provider's
//! credential and static headers, which win), the `Host` its base names and a
//! `Content-Length`; only the request id, the `traceparent` and the length change. So each
//! destination keeps four starting maps (a whole answer or a stream, traced or not), made when
//! the snapshot is built, and such a request clones one and puts its own values in their
//! places, found by position: no name is hashed or looked up, and the map never grows on the
//! way (a cloned map has no spare room, so the `Host` the pool adds and the `Content-Length`
//! hyper adds would each have moved it to a larger allocation).
//!
//! A request that does not fit (another host than the base's, `extra` headers from the
//! adapter, a client's `tracestate`, no body) has its map built afresh, header by header, as
//! every request's was before: both ways give the same headers in the same order.

use std::sync::OnceLock;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, HOST, USER_AGENT};
use http::uri::{Authority, Scheme};
use http::{HeaderMap, HeaderName, HeaderValue, Uri};

use super::HostKey;

/// The W3C trace-context headers, named once (no parse of the name per request).
pub(crate) const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub(crate) const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The trace context a request carries upstream: its attempt's `traceparent` and the client's
/// `tracestate`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TraceContext<'a> {
    pub traceparent: &'a HeaderValue,
    pub tracestate: Option<&'a HeaderValue>,
}

static GATEWAY_AGENT: HeaderValue =
    HeaderValue::from_static(concat!("aisix/", env!("CARGO_PKG_VERSION")));

/// What a place holds until a request fills it (never sent: a request that uses a starting
/// map fills each of its places).
const UNFILLED: HeaderValue = HeaderValue::from_static("-");

/// A provider's starting maps, and the host they are for. Each worker's snapshot holds its
/// own (a map of a provider with one credential is under 1 KiB: two per provider and worker,
/// four once a request is traced).
#[derive(Debug)]
pub(crate) struct Heads {
    /// The base's `Host`: `None` when it names none (each request's map is built afresh).
    host: Option<HeaderValue>,
    /// Untraced, for a whole answer and for a stream (`Accept`).
    plain: Option<[Head; 2]>,
    /// With a `traceparent` place: made on the first traced request, so never with export off.
    traced: OnceLock<Option<[Head; 2]>>,
    /// The scheme and authority of the base: a request to another has its map built afresh.
    base: Option<(Scheme, Authority)>,
    /// The provider's own headers, for a map built afresh.
    provider: HeaderMap,
}

#[derive(Debug)]
struct Head {
    headers: HeaderMap,
    /// Where the request id, the `traceparent` and the `Content-Length` go among the map's
    /// values, in the order they come; `None` where a provider header of that name took the
    /// place (the provider's wins, as it always has).
    places: [Option<usize>; 3],
}

impl Heads {
    /// The starting maps of a provider that adds `provider` to each request and whose requests
    /// go to `base`'s host.
    pub(crate) fn new(provider: HeaderMap, base: Option<&Uri>) -> Self {
        let base = base.and_then(HostKey::of);
        let host = base
            .as_ref()
            .and_then(|key| HeaderValue::from_str(key.host_header()).ok());
        let plain = host.as_ref().map(|host| pair(&provider, host, false));
        Self {
            host,
            plain,
            traced: OnceLock::new(),
            base: base.map(|key| (key.scheme, key.authority)),
            provider,
        }
    }

    /// The destination's own headers, which every request carries.
    pub(crate) fn provider(&self) -> &HeaderMap {
        &self.provider
    }

    /// The headers of a request at `uri` with a body of `body`, for a stream or not, with its
    /// request id, its trace context and the adapter's `extra`. `Host` and `Content-Length`
    /// are among them when a starting map was used; else the pool and hyper add them, as
    /// before.
    pub(crate) fn headers(
        &self,
        uri: &Uri,
        body: &Bytes,
        stream: bool,
        request_id: &HeaderValue,
        context: Option<TraceContext<'_>>,
        extra: &HeaderMap,
    ) -> HeaderMap {
        let fits = extra.is_empty()
            && !body.is_empty()
            && context.is_none_or(|c| c.tracestate.is_none())
            && self.base.as_ref().is_some_and(|(scheme, authority)| {
                uri.scheme() == Some(scheme) && uri.authority() == Some(authority)
            });
        let traceparent = context.map(|c| c.traceparent);
        let starting = match traceparent {
            None => self.plain.as_ref(),
            Some(_) => self
                .traced
                .get_or_init(|| {
                    let host = self.host.as_ref()?;
                    Some(pair(&self.provider, host, true))
                })
                .as_ref(),
        };
        match starting {
            Some(pair) if fits => {
                pair[usize::from(stream)].fill(request_id, traceparent, body.len())
            }
            _ => built_afresh(&self.provider, stream, request_id, context, extra),
        }
    }
}

/// The starting maps for a whole answer and for a stream, traced or not.
fn pair(provider: &HeaderMap, host: &HeaderValue, traced: bool) -> [Head; 2] {
    [false, true].map(|stream| Head::new(provider, host, stream, traced))
}

/// The map built header by header: the gateway's own, the trace context, `extra` (which
/// replaces the gateway's own) and the provider's (which replace any). Sized once for every
/// header it will carry, so it never grows on the way: these, and `Host` and `Content-Length`,
/// which are added where it is sent.
fn built_afresh(
    provider: &HeaderMap,
    stream: bool,
    request_id: &HeaderValue,
    context: Option<TraceContext<'_>>,
    extra: &HeaderMap,
) -> HeaderMap {
    let traced = context.map_or(0, |c| 1 + usize::from(c.tracestate.is_some()));
    let mut headers = HeaderMap::with_capacity(6 + traced + extra.len() + provider.len());
    own(&mut headers, stream, request_id.clone());
    if let Some(context) = context {
        headers.insert(TRACEPARENT, context.traceparent.clone());
        if let Some(state) = context.tracestate {
            headers.insert(TRACESTATE, state.clone());
        }
    }
    for (name, value) in extra {
        headers.insert(name, value.clone());
    }
    for (name, value) in provider {
        headers.insert(name, value.clone());
    }
    headers
}

/// The gateway's own headers, the first of every upstream request.
fn own(headers: &mut HeaderMap, stream: bool, request_id: HeaderValue) {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        ACCEPT,
        HeaderValue::from_static(if stream {
            "text/event-stream"
        } else {
            "application/json"
        }),
    );
    headers.insert(USER_AGENT, GATEWAY_AGENT.clone());
    headers.insert(&aisix_obs::request_id::HEADER, request_id);
}

impl Head {
    fn new(provider: &HeaderMap, host: &HeaderValue, stream: bool, traced: bool) -> Self {
        let mut headers = HeaderMap::with_capacity(7 + provider.len());
        own(&mut headers, stream, UNFILLED);
        if traced {
            headers.insert(TRACEPARENT, UNFILLED);
        }
        for (name, value) in provider {
            headers.insert(name, value.clone());
        }
        // Where the pool and hyper would add them: after every other.
        if !headers.contains_key(HOST) {
            headers.insert(HOST, host.clone());
        }
        if !headers.contains_key(CONTENT_LENGTH) {
            headers.insert(CONTENT_LENGTH, UNFILLED);
        }
        let place = |name: &HeaderName| {
            if provider.contains_key(name) {
                return None;
            }
            headers.iter().position(|(n, _)| n == name)
        };
        let places = [
            place(&aisix_obs::request_id::HEADER),
            traced.then(|| place(&TRACEPARENT)).flatten(),
            place(&CONTENT_LENGTH),
        ];
        debug_assert!(
            places.iter().flatten().is_sorted_by(|a, b| a < b),
            "the places come in the order they are filled"
        );
        // A clone holds no spare room (what the map had to grow into is not kept).
        Self {
            headers: headers.clone(),
            places,
        }
    }

    /// A copy of the starting map with a request's values in their places.
    fn fill(
        &self,
        request_id: &HeaderValue,
        traceparent: Option<&HeaderValue>,
        length: usize,
    ) -> HeaderMap {
        let mut headers = self.headers.clone();
        let mut values = headers.values_mut();
        // Each place is reached from the one before it.
        let mut at = 0;
        let mut put = |place: Option<usize>, value: HeaderValue| {
            if let Some(place) = place
                && let Some(slot) = values.nth(place - at)
            {
                *slot = value;
                at = place + 1;
            }
        };
        put(self.places[0], request_id.clone());
        if let Some(traceparent) = traceparent {
            put(self.places[1], traceparent.clone());
        }
        put(self.places[2], HeaderValue::from(length));
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn provider(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn pairs(map: &HeaderMap) -> Vec<(String, String)> {
        map.iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    /// What the upstream receives from a map built afresh: the pool's `Host` (when it has
    /// none) and hyper's `Content-Length` (when it has none) after the rest.
    fn as_sent(mut map: HeaderMap, uri: &Uri, length: usize) -> HeaderMap {
        if !map.contains_key(HOST) {
            let key = HostKey::of(uri).unwrap();
            map.insert(HOST, HeaderValue::from_str(key.host_header()).unwrap());
        }
        if !map.contains_key(CONTENT_LENGTH) {
            map.insert(CONTENT_LENGTH, HeaderValue::from(length));
        }
        map
    }

    static PARENT: HeaderValue =
        HeaderValue::from_static("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    static STATE: HeaderValue = HeaderValue::from_static("vendor=1");

    #[test]
    fn a_request_s_headers_from_a_starting_map_are_those_built_afresh_as_they_are_sent() {
        let id = HeaderValue::from_static("req-1");
        let body = Bytes::from_static(br#"{"model":"m"}"#);
        let uri = Uri::from_static("http://127.0.0.1:8080/v1/chat/completions");
        let base = Uri::from_static("http://127.0.0.1:8080/v1");
        let parent = TraceContext {
            traceparent: &PARENT,
            tracestate: None,
        };
        let providers = [
            provider(&[]),
            provider(&[("authorization", "Bearer sk-1")]),
            provider(&[("authorization", "Bearer sk-1"), ("x-team", "a")]),
            // Headers of the gateway's own names: the provider's win, and its places stay as
            // the provider set them.
            provider(&[("x-request-id", "fixed"), ("user-agent", "theirs")]),
            provider(&[("traceparent", "theirs"), ("content-type", "text/plain")]),
            provider(&[("host", "virtual.example"), ("content-length", "7")]),
            // Two values of one name: the last is kept, as an insert of each did.
            provider(&[("x-team", "a"), ("x-team", "b"), ("api-key", "k")]),
        ];
        for provider_headers in &providers {
            let heads = Heads::new(provider_headers.clone(), Some(&base));
            for stream in [false, true] {
                for context in [None, Some(parent)] {
                    let got = heads.headers(&uri, &body, stream, &id, context, &HeaderMap::new());
                    let want = as_sent(
                        built_afresh(provider_headers, stream, &id, context, &HeaderMap::new()),
                        &uri,
                        body.len(),
                    );
                    let case = format!("{provider_headers:?} stream={stream} {context:?}");
                    assert_eq!(pairs(&got), pairs(&want), "{case}");
                    assert!(got.values().all(|v| v != UNFILLED), "{case}: {got:?}");
                }
            }
        }
    }

    #[test]
    fn a_request_that_fits_no_starting_map_has_its_headers_built_afresh() {
        let id = HeaderValue::from_static("req-2");
        let body = Bytes::from_static(b"{}");
        let base = Uri::from_static("https://api.example.com/v1");
        let credential = provider(&[("authorization", "Bearer sk-2")]);
        let heads = Heads::new(credential.clone(), Some(&base));
        let mut extra = HeaderMap::new();
        extra.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        let with_state = TraceContext {
            traceparent: &PARENT,
            tracestate: Some(&STATE),
        };
        let on_base = Uri::from_static("https://api.example.com/v1/messages");
        let cases: [(&str, Uri, Bytes, Option<TraceContext<'_>>, &HeaderMap); 5] = [
            (
                "another host",
                Uri::from_static("https://eu.example.com/v1/x"),
                body.clone(),
                None,
                &HeaderMap::new(),
            ),
            (
                "another scheme",
                Uri::from_static("http://api.example.com/v1/x"),
                body.clone(),
                None,
                &HeaderMap::new(),
            ),
            ("extra headers", on_base.clone(), body.clone(), None, &extra),
            (
                "a tracestate",
                on_base.clone(),
                body.clone(),
                Some(with_state),
                &HeaderMap::new(),
            ),
            (
                "no body",
                on_base.clone(),
                Bytes::new(),
                None,
                &HeaderMap::new(),
            ),
        ];
        for (case, uri, body, context, extra) in cases {
            let got = heads.headers(&uri, &body, false, &id, context, extra);
            let want = built_afresh(&credential, false, &id, context, extra);
            assert_eq!(pairs(&got), pairs(&want), "{case}");
            assert!(
                !got.contains_key(HOST) && !got.contains_key(CONTENT_LENGTH),
                "{case}"
            );
        }
        // A base with no host has no starting maps.
        let hostless = Heads::new(credential.clone(), None);
        let got = hostless.headers(&on_base, &body, false, &id, None, &HeaderMap::new());
        assert!(!got.contains_key(HOST));
    }

    #[test]
    fn the_traced_starting_maps_are_made_only_once_a_request_is_traced() {
        let base = Uri::from_static("http://127.0.0.1:9/v1");
        let heads = Heads::new(HeaderMap::new(), Some(&base));
        let body = Bytes::from_static(b"{}");
        let id = HeaderValue::from_static("r");
        heads.headers(&base, &body, true, &id, None, &HeaderMap::new());
        assert!(heads.traced.get().is_none(), "untraced requests make none");
        let traced = TraceContext {
            traceparent: &PARENT,
            tracestate: None,
        };
        let got = heads.headers(&base, &body, true, &id, Some(traced), &HeaderMap::new());
        assert!(heads.traced.get().is_some_and(Option::is_some));
        assert_eq!(got.get(TRACEPARENT), Some(&PARENT));
    }

    #[test]
    fn the_host_of_a_starting_map_is_the_one_the_pool_would_send() {
        let id = HeaderValue::from_static("r");
        let body = Bytes::from_static(b"{}");
        for (base, host) in [
            ("https://api.example.com/v1", "api.example.com"),
            ("https://api.example.com:443/v1", "api.example.com"),
            ("http://127.0.0.1:80/v1", "127.0.0.1"),
            ("http://127.0.0.1:8443/v1", "127.0.0.1:8443"),
            ("https://user:pw@api.example.com/v1", "api.example.com"),
        ] {
            let base = Uri::try_from(base).unwrap();
            let heads = Heads::new(HeaderMap::new(), Some(&base));
            let got = heads.headers(&base, &body, false, &id, None, &HeaderMap::new());
            assert_eq!(got.get(HOST).unwrap(), host, "{base}");
            assert_eq!(got.get(CONTENT_LENGTH).unwrap(), "2");
        }
    }

    #[test]
    fn a_provider_s_credential_stays_sensitive_in_every_request_s_headers() {
        let mut key = HeaderValue::from_static("Bearer sk-secret");
        key.set_sensitive(true);
        let mut provider_headers = HeaderMap::new();
        provider_headers.insert(http::header::AUTHORIZATION, key);
        let base = Uri::from_static("http://127.0.0.1:9/v1");
        let heads = Heads::new(provider_headers.clone(), Some(&base));
        let uri = Uri::from_static("http://127.0.0.1:9/v1/chat/completions");
        let got = heads.headers(
            &uri,
            &Bytes::from_static(b"{}"),
            false,
            &HeaderValue::from_static("r"),
            None,
            &HeaderMap::new(),
        );
        let auth = got.get(http::header::AUTHORIZATION).unwrap();
        assert!(auth.is_sensitive());
        assert_eq!(auth, "Bearer sk-secret");
    }
}
