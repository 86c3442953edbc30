//! An `https` provider: the gateway verifies the provider's certificate (here a test CA given
//! through `SSL_CERT_FILE`, which the system trust store honours), negotiates HTTP/2 by ALPN,
//! and multiplexes concurrent requests over that one connection.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use bytes::Bytes;
use http::{Request, Response, Version};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// What the TLS provider saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    http2_requests: AtomicUsize,
    requests: AtomicUsize,
    /// `:scheme`, `:authority` and whether a `Host` header came too, per h2 request.
    pseudo: std::sync::Mutex<Vec<(String, String, bool)>>,
}

/// A TLS provider offering h2 and http/1.1, answering every request with a chat completion.
async fn start_tls_provider(
    cert: &rcgen::CertifiedKey<rcgen::KeyPair>,
    seen: Arc<Seen>,
) -> SocketAddr {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![CertificateDer::from(cert.cert.der().to_vec())], key)
    .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            seen.connections.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        seen.requests.fetch_add(1, Ordering::SeqCst);
                        if request.version() == Version::HTTP_2 {
                            seen.http2_requests.fetch_add(1, Ordering::SeqCst);
                            seen.pseudo.lock().unwrap().push((
                                request.uri().scheme_str().unwrap_or_default().to_owned(),
                                request
                                    .uri()
                                    .authority()
                                    .map(|a| a.to_string())
                                    .unwrap_or_default(),
                                request.headers().contains_key("host"),
                            ));
                        }
                        // Hold each answer briefly, so concurrent requests overlap.
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        let body = r#"{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"over tls"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#;
                        Ok::<_, Infallible>(
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from_static(body.as_bytes())))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    addr
}

both_modes! {
    async fn an_https_provider_is_verified_and_reached_over_multiplexed_http2(mode: Mode) {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let seen = Arc::new(Seen::default());
        let provider = start_tls_provider(&cert, seen.clone()).await;
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("provider-ca.pem");
        std::fs::write(&ca, cert.cert.pem()).unwrap();

        let resources = format!(
            r#"_format_version: "1"
provider_keys:
  - display_name: secure
    provider: openai
    api_key: sk-upstream
    api_base: https://localhost:{port}/v1
models:
  - display_name: m
    provider: openai
    model_name: m
    provider_key: secure
api_keys:
  - display_name: k
    key_env: TLS_TEST_KEY
    allowed_models: ["*"]
"#,
            port = provider.port()
        );
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .workers(Some(1))
                .resources(resources)
                .env("TLS_TEST_KEY", "sk-client")
                .env("SSL_CERT_FILE", ca.to_str().unwrap()),
        );
        let addr = gateway.addr();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                tokio::spawn(async move {
                    client::send(
                        addr,
                        client::request(
                            "POST",
                            "/v1/chat/completions",
                            &[("authorization", "Bearer sk-client")],
                            Some(r#"{"model":"m","messages":[]}"#),
                        ),
                    )
                    .await
                })
            })
            .collect();
        for task in tasks {
            let reply = task.await.unwrap();
            assert_eq!(reply.status, 200, "{}\n{}", reply.text(), gateway.logs());
            assert_eq!(reply.json()["choices"][0]["message"]["content"], "over tls");
        }
        assert_eq!(seen.requests.load(Ordering::SeqCst), 8);
        assert_eq!(seen.http2_requests.load(Ordering::SeqCst), 8, "ALPN should pick h2");
        assert_eq!(seen.connections.load(Ordering::SeqCst), 1, "h2 requests share one connection");
        let expected = ("https".to_owned(), format!("localhost:{}", provider.port()), false);
        for pseudo in seen.pseudo.lock().unwrap().iter() {
            assert_eq!(pseudo, &expected, "h2 requests carry :scheme and :authority, not Host");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_provider_with_an_untrusted_certificate_is_a_502() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let provider = start_tls_provider(&cert, Arc::new(Seen::default())).await;
    let resources = format!(
        "_format_version: \"1\"\nprovider_keys:\n  - {{display_name: secure, provider: openai, api_base: \"https://localhost:{}/v1\"}}\nmodels:\n  - {{display_name: m, provider: openai, model_name: m, provider_key: secure}}\napi_keys:\n  - {{display_name: k, key_env: TLS_TEST_KEY, allowed_models: [\"*\"]}}\n",
        provider.port()
    );
    let gateway = Gateway::start(
        &GatewayConfig::new(Mode::ThreadPerCore)
            .resources(resources)
            .env("TLS_TEST_KEY", "sk-client"),
    );
    let reply = client::send(
        gateway.addr(),
        client::request(
            "POST",
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-client")],
            Some(r#"{"model":"m","messages":[]}"#),
        ),
    )
    .await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(reply.json()["error"]["code"], "upstream_unavailable");
}

both_modes! {
    async fn an_https_provider_is_reached_through_a_connect_tunnel_in_https_proxy(mode: Mode) {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let seen = Arc::new(Seen::default());
        let provider = start_tls_provider(&cert, seen.clone()).await;
        let proxy = aisix_e2e::tinyproxy::Tinyproxy::start(&[provider.port()]);
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("provider-ca.pem");
        std::fs::write(&ca, cert.cert.pem()).unwrap();
        let resources = format!(
            "_format_version: \"1\"\nprovider_keys:\n  - {{display_name: secure, provider: openai, api_key: sk-upstream, api_base: \"https://localhost:{}/v1\"}}\nmodels:\n  - {{display_name: m, provider: openai, model_name: m, provider_key: secure}}\napi_keys:\n  - {{display_name: k, key_env: TLS_TEST_KEY, allowed_models: [\"*\"]}}\n",
            provider.port()
        );
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .workers(Some(1))
                .resources(resources)
                .env("TLS_TEST_KEY", "sk-client")
                .env("SSL_CERT_FILE", ca.to_str().unwrap())
                .env("HTTPS_PROXY", &proxy.url()),
        );
        for _ in 0..2 {
            let reply = client::send(
                gateway.addr(),
                client::request("POST", "/v1/chat/completions", &[("authorization", "Bearer sk-client")], Some(r#"{"model":"m","messages":[]}"#)),
            )
            .await;
            assert_eq!(reply.status, 200, "{}\n{}", reply.text(), proxy.log());
            assert_eq!(reply.json()["choices"][0]["message"]["content"], "over tls");
        }
        let tunnel = format!("CONNECT localhost:{}", provider.port());
        assert_eq!(proxy.log().matches(&tunnel).count(), 1, "one tunnel, reused:\n{}", proxy.log());
        assert_eq!(seen.http2_requests.load(Ordering::SeqCst), 2, "TLS and ALPN end to end through the tunnel");
    }
}
