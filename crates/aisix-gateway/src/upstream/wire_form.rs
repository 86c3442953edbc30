//! The wire form of an upstream request: which host it goes to ([`HostKey`], with its `Host`
//! value) and how its head is written for the connection it goes out on (origin or absolute
//! form, `Host`, the forwarding proxy's credentials).

use http::header::{HOST, PROXY_AUTHORIZATION};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Request, Uri};

use super::egress::Proxy;
use super::pool::{Body, Protocol};

#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct HostKey {
    pub(crate) scheme: Scheme,
    pub(crate) authority: Authority,
}

impl HostKey {
    /// The `Host` value: the authority without user info, and without the scheme's default
    /// port (RFC 9110 §7.2).
    pub(crate) fn host_header(&self) -> &str {
        let authority = self.authority.as_str();
        let authority = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        let default_port = if self.scheme == Scheme::HTTPS {
            443
        } else {
            80
        };
        match self.authority.port_u16() {
            Some(port) if port == default_port => authority
                .rsplit_once(':')
                .map_or(authority, |(host, _)| host),
            _ => authority,
        }
    }

    pub(crate) fn of(uri: &Uri) -> Option<Self> {
        Some(Self {
            scheme: uri.scheme()?.clone(),
            authority: uri.authority()?.clone(),
        })
    }
}

/// Puts `request` in the form its connection wants. HTTP/1.1 gets the origin form
/// (`POST /v1/chat/completions`) and a `Host` header (RFC 9112 §3.2), or, through a forwarding
/// proxy, the absolute form with `Host` and the proxy's credentials (§3.2.2); HTTP/2 gets the
/// absolute URI, from which hyper writes `:scheme` and `:authority`, and no `Host`. A request
/// handed back unsent by one connection may go out on a connection of the other protocol, so
/// both ways are handled.
pub(super) fn wire_form(
    mut request: Request<Body>,
    key: &HostKey,
    protocol: Protocol,
    forward: Option<&Proxy>,
) -> Request<Body> {
    let path = request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let absolute = |path: PathAndQuery| {
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(key.scheme.clone());
        parts.authority = Some(key.authority.clone());
        parts.path_and_query = Some(path);
        Uri::from_parts(parts).ok()
    };
    match protocol {
        Protocol::Http2 => {
            request.headers_mut().remove(HOST);
            if request.uri().authority().is_none()
                && let Some(uri) = absolute(path)
            {
                *request.uri_mut() = uri;
            }
        }
        Protocol::Http1 | Protocol::Unknown => {
            if !request.headers().contains_key(HOST)
                && let Ok(host) = HeaderValue::from_str(key.host_header())
            {
                request.headers_mut().insert(HOST, host);
            }
            match forward {
                Some(proxy) => {
                    if let Some(uri) = absolute(path) {
                        *request.uri_mut() = uri;
                    }
                    if let Some(authorization) = &proxy.authorization {
                        request
                            .headers_mut()
                            .insert(PROXY_AUTHORIZATION, authorization.clone());
                    }
                }
                None => *request.uri_mut() = Uri::from(path),
            }
        }
    }
    request
}
