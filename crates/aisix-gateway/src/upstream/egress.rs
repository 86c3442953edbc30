//! How upstream connections leave the host: directly, or through the proxy that
//! `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` name (upper or lower case), except for the hosts
//! `NO_PROXY` lists. Read once at startup; an https provider is reached through a CONNECT
//! tunnel (TLS end to end), an http one by sending the request in absolute form to the proxy.
//! The proxy itself is spoken to in plain HTTP (`http://` proxy URLs); other kinds (`socks5://`,
//! `https://`) are reported at startup and not used.
//! The route of each provider is worked out when a snapshot is built, never per request.

use std::sync::Arc;

use http::{HeaderValue, Uri};
use hyper_util::client::proxy::matcher::Matcher;

/// The proxy settings read from the environment at startup.
#[derive(Clone)]
pub(crate) struct Egress {
    // shared: read-only after startup; every worker's snapshot asks it for routes.
    matcher: Option<Arc<Matcher>>,
}

/// How connections to one provider host are made.
#[derive(Debug, Clone, Default)]
pub(crate) enum Route {
    #[default]
    Direct,
    /// An https provider: a CONNECT tunnel through the proxy, then TLS with the provider.
    Tunnel(Proxy),
    /// An http provider: connect to the proxy and send requests in absolute form.
    Forward(Proxy),
}

/// A proxy and its credentials (from the URL's user info, as `Basic`), never logged.
#[derive(Debug, Clone)]
pub(crate) struct Proxy {
    pub uri: Uri,
    pub authorization: Option<HeaderValue>,
}

const PROXY_VARS: [&str; 8] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

impl Egress {
    /// Reads the proxy variables of the process environment.
    pub(crate) fn from_env() -> Self {
        let any = PROXY_VARS
            .iter()
            .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
        let egress = Self {
            matcher: any.then(|| Arc::new(Matcher::from_env())),
        };
        for (scheme, sample) in [
            ("https", "https://provider.invalid/"),
            ("http", "http://provider.invalid/"),
        ] {
            if let Route::Tunnel(proxy) | Route::Forward(proxy) =
                egress.route(&Uri::from_static(sample))
            {
                tracing::info!(scheme, proxy = %proxy.uri, "upstream egress goes through a proxy (NO_PROXY hosts excepted)");
            }
        }
        egress
    }

    /// Connects directly, whatever the environment says.
    pub(crate) fn direct() -> Self {
        Self { matcher: None }
    }

    /// The route to the host of `uri`.
    pub(crate) fn route(&self, uri: &Uri) -> Route {
        let Some(intercept) = self
            .matcher
            .as_ref()
            .and_then(|m| m.intercept(uri))
            .filter(|i| i.uri().scheme_str() == Some("http"))
        else {
            return Route::Direct;
        };
        let proxy = Proxy {
            uri: intercept.uri().clone(),
            authorization: intercept.basic_auth().cloned().map(|mut value| {
                value.set_sensitive(true);
                value
            }),
        };
        match uri.scheme_str() {
            Some("https") => Route::Tunnel(proxy),
            _ => Route::Forward(proxy),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(https: &str, http: &str, no: &str) -> Egress {
        let matcher = Matcher::builder().https(https).http(http).no(no).build();
        Egress {
            matcher: Some(Arc::new(matcher)),
        }
    }

    #[test]
    fn https_tunnels_http_forwards_and_no_proxy_goes_direct() {
        let e = egress(
            "http://user:pw@proxy:3128",
            "http://proxy:3128",
            "internal.example, 10.0.0.0/8",
        );
        let Route::Tunnel(proxy) = e.route(&Uri::from_static("https://api.openai.com/v1")) else {
            panic!("https is tunnelled");
        };
        assert_eq!(proxy.uri.host(), Some("proxy"));
        assert!(proxy.authorization.is_some_and(|a| a.is_sensitive()));
        assert!(matches!(
            e.route(&Uri::from_static("http://vllm:8000/v1")),
            Route::Forward(_)
        ));
        assert!(matches!(
            e.route(&Uri::from_static("https://api.internal.example/v1")),
            Route::Direct
        ));
        assert!(matches!(
            e.route(&Uri::from_static("http://10.1.2.3:8000/v1")),
            Route::Direct
        ));
        assert!(matches!(
            Egress::direct().route(&Uri::from_static("https://x/")),
            Route::Direct
        ));
    }
}
