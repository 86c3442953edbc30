//! The serving core seen from outside: threads, configuration overlay, port conflicts, drain,
//! supervision, timeouts, HTTP/2 and TLS, in both serving modes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, closed_by_peer, read_response};
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};

fn tpc_threads(names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| n.starts_with("tpc-"))
        .cloned()
        .collect()
}

fn runtime_threads(names: &[String]) -> usize {
    names.iter().filter(|n| *n == "tokio-rt-worker").count()
}

both_modes! {
    async fn threads_show_the_serving_mode(mode: Mode) {
        let gateway = Gateway::start(&GatewayConfig::new(mode).workers(Some(3)));
        let names = gateway.thread_names();
        match mode {
            Mode::ThreadPerCore => {
                assert_eq!(tpc_threads(&names), ["tpc-0", "tpc-1", "tpc-2"], "{names:?}");
                assert_eq!(runtime_threads(&names), 0, "{names:?}");
            }
            Mode::Shared => {
                assert!(tpc_threads(&names).is_empty(), "{names:?}");
                assert_eq!(runtime_threads(&names), 3, "{names:?}");
            }
        }
        let logs = gateway.logs();
        let worker_lines = logs.lines().filter(|l| l.contains("worker accepting")).count();
        assert_eq!(worker_lines, 3, "one startup line per worker:\n{logs}");
        assert!(logs.contains(&format!("mode={mode}")));
    }
}

both_modes! {
    async fn health_endpoints_answer(mode: Mode) {
        let gateway = Gateway::start(&GatewayConfig::new(mode));
        let live = client::get(gateway.addr(), "/livez").await;
        assert_eq!(live.status, 200);
        assert_eq!(live.text().trim(), "ok");
        let ready = client::get(gateway.addr(), "/readyz").await;
        assert_eq!(ready.status, 200);
        let unknown = client::get(gateway.addr(), "/nope").await;
        assert_eq!(unknown.status, 404);
        assert_eq!(unknown.json()["error"]["type"], "invalid_request_error");
    }
}

both_modes! {
    async fn http2_prior_knowledge_is_served(mode: Mode) {
        let gateway = Gateway::start(&GatewayConfig::new(mode));
        let reply = client::send_h2(gateway.addr(), client::request("GET", "/livez", &[], None)).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.text().trim(), "ok");
    }
}

both_modes! {
    async fn keep_alive_serves_many_requests_on_one_connection(mode: Mode) {
        let gateway = Gateway::start(&GatewayConfig::new(mode));
        let mut stream = TcpStream::connect(gateway.addr()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        for _ in 0..5 {
            stream.write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
            let response = read_response(&mut stream);
            assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        }
    }
}

both_modes! {
    async fn environment_overrides_the_file(mode: Mode) {
        // The file asks for `mode` with 2 workers; the environment says 3 workers, shared.
        let config = GatewayConfig::new(mode)
            .workers(Some(2))
            .env("AISIX_PROXY__WORKERS", "3")
            .env("AISIX_PROXY__THREAD_PER_CORE", "false");
        let gateway = Gateway::start(&config);
        let names = gateway.thread_names();
        assert!(tpc_threads(&names).is_empty(), "{names:?}");
        assert_eq!(runtime_threads(&names), 3, "{names:?}");

        let config = GatewayConfig::new(mode)
            .workers(Some(2))
            .env("AISIX_PROXY__WORKERS", "3")
            .env("AISIX_PROXY__THREAD_PER_CORE", "true");
        let gateway = Gateway::start(&config);
        assert_eq!(tpc_threads(&gateway.thread_names()), ["tpc-0", "tpc-1", "tpc-2"]);
    }
}

both_modes! {
    async fn unset_workers_follow_the_cpu_affinity_mask(mode: Mode) {
        let gateway = Gateway::start(&GatewayConfig::new(mode).workers(None).taskset("0"));
        let names = gateway.thread_names();
        match mode {
            Mode::ThreadPerCore => assert_eq!(tpc_threads(&names), ["tpc-0"], "{names:?}"),
            Mode::Shared => assert_eq!(runtime_threads(&names), 1, "{names:?}"),
        }
    }
}

both_modes! {
    async fn a_second_gateway_on_the_same_address_fails_loudly(mode: Mode) {
        let first = Gateway::start(&GatewayConfig::new(mode));
        let taken = first.addr();
        // Whatever mode the second one runs in, the taken address is refused.
        for second_mode in [Mode::ThreadPerCore, Mode::Shared] {
            let config = GatewayConfig::new(second_mode).env("AISIX_PROXY__ADDR", &taken.to_string());
            let mut second = Gateway::spawn(&config);
            let status = second.wait_exit(Duration::from_secs(20)).expect("second gateway exits");
            assert!(!status.success());
            let logs = second.logs();
            assert!(logs.contains(&taken.to_string()) && logs.contains("already in use"), "{logs}");
        }
        assert_eq!(client::get(taken, "/livez").await.status, 200, "first keeps serving");
    }
}

#[test]
fn zero_workers_is_refused_naming_the_key() {
    for (config, env) in [
        (
            GatewayConfig::new(Mode::ThreadPerCore).workers(Some(0)),
            None,
        ),
        (
            GatewayConfig::new(Mode::ThreadPerCore),
            Some("AISIX_PROXY__WORKERS"),
        ),
    ] {
        let config = match env {
            Some(var) => config.env(var, "0"),
            None => config,
        };
        let mut gateway = Gateway::spawn(&config);
        let status = gateway.wait_exit(Duration::from_secs(20)).expect("exits");
        assert!(!status.success());
        let logs = gateway.logs();
        assert!(logs.contains("proxy.workers"), "{logs}");
        if let Some(var) = env {
            assert!(logs.contains(var), "{logs}");
        }
    }
}

#[test]
fn unknown_keys_are_refused_naming_them() {
    let config = GatewayConfig::new(Mode::ThreadPerCore)
        .proxy("  wrokers: 2\n")
        .env("AISIX_DOWNSTREAM__NOPE", "1");
    let mut gateway = Gateway::spawn(&config);
    let status = gateway.wait_exit(Duration::from_secs(20)).expect("exits");
    assert!(!status.success());
    let logs = gateway.logs();
    assert!(logs.contains("proxy.wrokers"), "{logs}");
    assert!(
        logs.contains("downstream.nope") && logs.contains("AISIX_DOWNSTREAM__NOPE"),
        "{logs}"
    );
}

both_modes! {
    async fn sigterm_when_idle_exits_promptly_with_zero(mode: Mode) {
        let mut gateway = Gateway::start(&GatewayConfig::new(mode).extra("shutdown:\n  drain_timeout_secs: 60\n"));
        // An idle keep-alive connection must not hold the drain open.
        let mut idle = TcpStream::connect(gateway.addr()).unwrap();
        idle.write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
        read_response(&mut idle);
        gateway.signal(libc::SIGTERM);
        let status = gateway.wait_exit(Duration::from_secs(10)).expect("exits well before the 60s drain timeout");
        assert_eq!(status.code(), Some(0), "{}", gateway.logs());
        assert!(closed_by_peer(&mut idle, Duration::from_secs(1)));
    }
}

both_modes! {
    async fn sigint_drains_and_exits_with_zero(mode: Mode) {
        let mut gateway = Gateway::start(&GatewayConfig::new(mode));
        gateway.signal(libc::SIGINT);
        let status = gateway.wait_exit(Duration::from_secs(10)).expect("exits");
        assert_eq!(status.code(), Some(0));
    }
}

both_modes! {
    async fn listeners_close_on_sigterm(mode: Mode) {
        // A slow-to-finish connection keeps the process alive while we look at the port.
        let mut gateway = Gateway::start(&GatewayConfig::new(mode).extra("shutdown:\n  drain_timeout_secs: 3\n").extra("downstream:\n  header_read_timeout_secs: 30\n"));
        let addr = gateway.addr();
        let mut half = TcpStream::connect(addr).unwrap();
        half.write_all(b"GET /livez HTTP/1.1\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        gateway.signal(libc::SIGTERM);
        assert!(gateway.wait_for_log("draining", Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(200));
        assert!(TcpStream::connect(addr).is_err(), "no listener accepts after SIGTERM");
        let status = gateway.wait_exit(Duration::from_secs(15)).expect("exits by the drain deadline");
        assert_eq!(status.code(), Some(0));
    }
}

#[cfg(debug_assertions)]
both_modes! {
    async fn a_dying_worker_takes_the_process_down(mode: Mode) {
        let mut gateway = Gateway::start(&GatewayConfig::new(mode).workers(Some(2)));
        let _ = client::get(gateway.addr(), "/__aisix/test/crash-worker").await;
        let status = gateway.wait_exit(Duration::from_secs(20)).expect("process exits");
        assert!(!status.success(), "{}", gateway.logs());
        let logs = gateway.logs();
        let worker = if mode.is_thread_per_core() { "worker tpc-" } else { "worker shared" };
        assert!(logs.contains(worker) && logs.contains("exited unexpectedly"), "{logs}");
    }
}

both_modes! {
    async fn a_connection_that_sends_no_head_is_closed_after_the_header_timeout(mode: Mode) {
        let gateway = Gateway::start(
            &GatewayConfig::new(mode).extra("downstream:\n  header_read_timeout_secs: 1\n  idle_timeout_secs: 600\n"),
        );
        let mut silent = TcpStream::connect(gateway.addr()).unwrap();
        assert!(closed_by_peer(&mut silent, Duration::from_secs(10)));
        let mut partial = TcpStream::connect(gateway.addr()).unwrap();
        partial.write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n").unwrap();
        assert!(closed_by_peer(&mut partial, Duration::from_secs(10)));
    }
}

both_modes! {
    async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(mode: Mode) {
        let gateway = Gateway::start(
            &GatewayConfig::new(mode).extra("downstream:\n  header_read_timeout_secs: 600\n  idle_timeout_secs: 1\n"),
        );
        let mut stream = TcpStream::connect(gateway.addr()).unwrap();
        stream.write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
        assert!(read_response(&mut stream).starts_with("HTTP/1.1 200"));
        assert!(closed_by_peer(&mut stream, Duration::from_secs(10)));
    }
}

both_modes! {
    async fn idle_timeout_zero_leaves_keep_alive_connections_open(mode: Mode) {
        let gateway = Gateway::start(
            &GatewayConfig::new(mode).extra("downstream:\n  header_read_timeout_secs: 1\n  idle_timeout_secs: 0\n"),
        );
        let mut stream = TcpStream::connect(gateway.addr()).unwrap();
        stream.write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
        assert!(read_response(&mut stream).starts_with("HTTP/1.1 200"));
        // Past several header timeouts: between requests the header deadline does not apply.
        assert!(!closed_by_peer(&mut stream, Duration::from_secs(3)));
        stream.write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
        assert!(read_response(&mut stream).starts_with("HTTP/1.1 200"));
    }
}

use aisix_e2e::tls::{client as tls_client, self_signed};

both_modes! {
    async fn tls_listener_serves_https_over_http1_and_h2(mode: Mode) {
        let certs = tempfile::tempdir().unwrap();
        let (cert_pem, cert, key) = self_signed(certs.path());
        let config = GatewayConfig::new(mode).proxy(&format!(
            "  tls:\n    cert_file: {}\n    key_file: {}\n",
            cert.display(),
            key.display()
        ));
        let mut gateway = Gateway::start_listening(&config);
        let addr = gateway.addr();
        assert!(gateway.try_exit().is_none());
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();

        // HTTP/1.1 over TLS.
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let tls = tls_client(&cert_pem, &[b"http/1.1"]).connect(name.clone(), tcp).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.unwrap();
        tokio::spawn(conn);
        let response = sender.send_request(client::request("GET", "/livez", &[("host", "localhost")], None)).await.unwrap();
        let reply = client::collect(response).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.text().trim(), "ok");

        // ALPN picks h2 when the client offers it.
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let tls = tls_client(&cert_pem, &[b"h2", b"http/1.1"]).connect(name, tcp).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (mut sender, conn) = hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(tls)).await.unwrap();
        tokio::spawn(conn);
        let request = client::request("GET", "https://localhost/readyz", &[], None);
        let reply = client::collect(sender.send_request(request).await.unwrap()).await;
        assert_eq!(reply.status, 200);

        // Plain HTTP on the TLS port gets nothing useful.
        assert_ne!(client::blocking_get_status(addr, "/livez"), Some(200));
    }
}

#[test]
fn a_bad_tls_path_fails_before_binding() {
    let config = GatewayConfig::new(Mode::ThreadPerCore).proxy(
        "  tls:\n    cert_file: /nonexistent/cert.pem\n    key_file: /nonexistent/key.pem\n",
    );
    let mut gateway = Gateway::spawn(&config);
    let status = gateway.wait_exit(Duration::from_secs(20)).expect("exits");
    assert!(!status.success());
    let logs = gateway.logs();
    assert!(logs.contains("/nonexistent/cert.pem"), "{logs}");
    assert!(!logs.contains("worker accepting"), "{logs}");
}
