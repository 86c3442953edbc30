//! Where connections are served: workers pinned to CPUs (`proxy.pin_workers`) and connections
//! handed to the least-loaded worker (`proxy.balance: handoff`), in both serving modes (the
//! shared runtime ignores both, with a warning).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client;
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::mock::MockProvider;
use aisix_e2e::prom::sample;

const KEY: &str = "sk-placement-test-1";

/// The first two CPUs this test may run on, from its own affinity mask.
fn two_allowed_cpus() -> (usize, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_owned();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    assert!(
        cpus.len() >= 2,
        "this test needs two CPUs to pin two workers to, and may use only {list}"
    );
    (cpus[0], cpus[1])
}

both_modes! {
    async fn pinned_workers_each_run_on_their_own_cpu(mode: Mode) {
        let (a, b) = two_allowed_cpus();
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .workers(Some(2))
                .taskset(&format!("{a},{b}"))
                .proxy("  pin_workers: true\n"),
        );
        let threads = gateway.threads();
        let process = threads
            .iter()
            .find(|t| t.name == "aisix")
            .expect("the main thread")
            .cpus_allowed
            .clone();
        let cpus_of = |name: &str| -> Vec<String> {
            threads.iter().filter(|t| t.name == name).map(|t| t.cpus_allowed.clone()).collect()
        };
        let logs = gateway.logs();
        match mode {
            Mode::ThreadPerCore => {
                assert_eq!(cpus_of("tpc-0"), [a.to_string()], "{threads:?}");
                assert_eq!(cpus_of("tpc-1"), [b.to_string()], "{threads:?}");
                assert_ne!(process, a.to_string(), "the control thread keeps the whole set");
                assert!(logs.contains(&format!("tpc-0→cpu {a}, tpc-1→cpu {b}")), "{logs}");
                for (worker, cpu) in [("tpc-0", a), ("tpc-1", b)] {
                    assert!(
                        logs.lines().any(|l| l.contains("worker accepting")
                            && l.contains(&format!("worker={worker}"))
                            && l.contains(&format!("cpu={cpu}"))),
                        "{logs}"
                    );
                }
            }
            Mode::Shared => {
                let runtime = cpus_of("tokio-rt-worker");
                assert_eq!(runtime.len(), 2, "{threads:?}");
                assert!(runtime.iter().all(|cpus| *cpus == process), "{threads:?}");
                assert!(
                    logs.lines().any(|l| l.contains("setting ignored in the shared runtime")
                        && l.contains("proxy.pin_workers")),
                    "{logs}"
                );
            }
        }
        assert_eq!(client::get(gateway.addr(), "/livez").await.status, 200);
    }
}

fn handoff_gateway(mode: Mode, mock: &MockProvider) -> Gateway {
    Gateway::start(
        &GatewayConfig::new(mode)
            .workers(Some(2))
            .proxy("  balance: handoff\n")
            .openai(&mock.base_url(), &[("m", "up-m")], KEY)
            .metrics(),
    )
}

async fn metrics_page(gateway: &Gateway) -> String {
    client::get(gateway.metrics_addr.unwrap(), "/metrics")
        .await
        .text()
}

/// `family{worker=…}` for each of `workers`.
fn per_worker(page: &str, family: &str, workers: &[&str]) -> Vec<f64> {
    workers
        .iter()
        .map(|w| sample(page, family, &[("worker", w)]))
        .collect()
}

/// Waits until no connection is open (the readiness probes' have closed), so the counts the
/// test reads are its own.
async fn wait_for_no_connections(gateway: &Gateway) {
    for _ in 0..250 {
        let page = metrics_page(gateway).await;
        if sample(&page, "aisix_worker_connections_open", &[]) == 0.0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("connections stayed open:\n{}", metrics_page(gateway).await);
}

fn chat() -> http::Request<http_body_util::Full<bytes::Bytes>> {
    client::request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &format!("Bearer {KEY}"))],
        Some(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#),
    )
}

async fn chat_ok(conn: &mut client::Connection) {
    let reply = conn.send(chat()).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.json()["choices"][0]["message"]["content"],
        "Hello from the mock provider."
    );
}

const TPC: [&str; 2] = ["tpc-0", "tpc-1"];

both_modes! {
    async fn handoff_spreads_one_clients_connections_evenly_over_the_workers(mode: Mode) {
        let mock = MockProvider::start();
        let gateway = handoff_gateway(mode, &mock);
        wait_for_no_connections(&gateway).await;

        // Eight keep-alive connections from one client, opened one after another: the kernel's
        // hash alone would usually leave the two workers uneven.
        let mut conns = Vec::new();
        for _ in 0..8 {
            let mut conn = client::Connection::open(gateway.addr()).await;
            chat_ok(&mut conn).await;
            conns.push(conn);
        }
        let before = metrics_page(&gateway).await;
        for conn in &mut conns {
            for _ in 0..3 {
                chat_ok(conn).await;
            }
        }
        let after = metrics_page(&gateway).await;
        match mode {
            Mode::ThreadPerCore => {
                let open = per_worker(&after, "aisix_worker_connections_open", &TPC);
                assert_eq!(open, [4.0, 4.0], "below 8 per worker the spread is within one:\n{after}");
                let requests: Vec<f64> = per_worker(&after, "aisix_worker_requests_total", &TPC)
                    .iter()
                    .zip(per_worker(&before, "aisix_worker_requests_total", &TPC))
                    .map(|(after, before)| after - before)
                    .collect();
                assert_eq!(requests, [12.0, 12.0], "each worker served its four connections");
            }
            Mode::Shared => {
                let open = sample(&after, "aisix_worker_connections_open", &[("worker", "shared")]);
                assert_eq!(open, 8.0, "{after}");
                let logs = gateway.logs();
                assert!(
                    logs.lines().any(|l| l.contains("setting ignored in the shared runtime")
                        && l.contains("proxy.balance")),
                    "{logs}"
                );
            }
        }
        assert_eq!(mock.request_count(), 32);
    }
}

/// GET /livez over TLS (HTTP/1.1) on a fresh connection, kept open.
async fn tls_livez(
    addr: SocketAddr,
    cert_pem: &str,
) -> hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>> {
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = aisix_e2e::tls::client(cert_pem, &[b"http/1.1"])
        .connect(name, tcp)
        .await
        .unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = client::request("GET", "/livez", &[("host", "localhost")], None);
    let reply = client::collect(sender.send_request(request).await.unwrap()).await;
    assert_eq!(reply.status, 200);
    sender
}

both_modes! {
    async fn handed_over_tls_connections_handshake_on_the_receiving_worker(mode: Mode) {
        let certs = tempfile::tempdir().unwrap();
        let (cert_pem, cert, key) = aisix_e2e::tls::self_signed(certs.path());
        let gateway = Gateway::start_listening(
            &GatewayConfig::new(mode)
                .workers(Some(2))
                .proxy(&format!(
                    "  balance: handoff\n  tls:\n    cert_file: {}\n    key_file: {}\n",
                    cert.display(),
                    key.display()
                ))
                .metrics(),
        );
        let metrics = gateway.metrics_addr.unwrap();
        let mut conns = Vec::new();
        for _ in 0..4 {
            conns.push(tls_livez(gateway.addr(), &cert_pem).await);
        }
        let page = client::get(metrics, "/metrics").await.text();
        match mode {
            Mode::ThreadPerCore => {
                assert_eq!(per_worker(&page, "aisix_worker_connections_open", &TPC), [2.0, 2.0], "{page}");
            }
            Mode::Shared => {
                assert_eq!(sample(&page, "aisix_worker_connections_open", &[("worker", "shared")]), 4.0, "{page}");
            }
        }
        drop(conns);
    }
}
