#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Bedrock with web-identity credentials as EKS gives a pod (`AWS_ROLE_ARN` +
//! `AWS_WEB_IDENTITY_TOKEN_FILE`), end to end in both serving modes: the gateway exchanges the
//! token file's token at STS `AssumeRoleWithWebIdentity` (the Bedrock stand-in's, its
//! parameters checked against botocore's STS model) and signs with the temporary keys, which
//! botocore's signer checks. The keys are short-lived, so they are renewed; a rotated token
//! STS refuses keeps the old keys until they expire, then answers 502 and counts the failure.
//! A second leg asks moto's STS (server mode): moto accepts the request and its temporary keys
//! sign what reaches Bedrock.

use std::time::Duration;

use aisix_e2e::both_modes;
use aisix_e2e::client::{self, Reply, request};
use aisix_e2e::gateway::{Gateway, GatewayConfig, Mode};
use aisix_e2e::prom;
use aisix_e2e::third_party::bedrock::{AwsCredentials, BedrockMock};
use serde_json::json;

const CLIENT_KEY: &str = "sk-client-bedrock-wi";
const ACCESS_KEY_ID: &str = "ASIAMOCKTEMPORARY1";
const SECRET_KEY: &str = "wJalrXUtnFEMI-temporary-secret-1";
const SESSION_TOKEN: &str = "FwoGZXIvYXdzEMOCKtemporarySessionToken";
const WEB_TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.eks-projected-token.sig";
const ROLE: &str = "arn:aws:iam::123456789012:role/aisix-bedrock";
const CLAUDE: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";

struct Rig {
    bedrock: BedrockMock,
    gateway: Gateway,
    token_file: tempfile::NamedTempFile,
}

fn start(mode: Mode) -> Rig {
    // Keys that live 6 s: renewed at two thirds of that, so a renewal happens during the test.
    let bedrock = BedrockMock::start_with_sts(
        AwsCredentials {
            access_key_id: ACCESS_KEY_ID,
            secret_access_key: SECRET_KEY,
            session_token: Some(SESSION_TOKEN),
            region: "us-west-2",
        },
        Some((WEB_TOKEN, "6")),
    );
    let token_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token_file.path(), format!("{WEB_TOKEN}\n")).unwrap();
    let resources = format!(
        r#"_format_version: "1"
provider_keys:
  - display_name: aws-wi
    provider: bedrock
    region: us-west-2
    api_base: {bedrock}
models:
  - {{display_name: claude, provider: bedrock, model_name: "{CLAUDE}", provider_key: aws-wi}}
api_keys:
  - display_name: client
    key_env: CLIENT_KEY
    allowed_models: ["*"]
"#,
        bedrock = bedrock.base_url(),
    );
    let gateway = Gateway::start(
        &GatewayConfig::new(mode)
            .resources(resources)
            .metrics()
            .env("CLIENT_KEY", CLIENT_KEY)
            .env("AWS_ACCESS_KEY_ID", "")
            .env("AWS_ROLE_ARN", ROLE)
            .env(
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                token_file.path().to_str().unwrap(),
            )
            .env("AWS_ROLE_SESSION_NAME", "aisix-e2e")
            .env("AWS_ENDPOINT_URL_STS", &bedrock.base_url()),
    );
    Rig {
        bedrock,
        gateway,
        token_file,
    }
}

impl Rig {
    async fn chat(&self) -> Reply {
        let auth = format!("Bearer {CLIENT_KEY}");
        let body =
            json!({"model": "claude", "messages": [{"role": "user", "content": "Hello there"}]})
                .to_string();
        client::send(
            self.gateway.addr(),
            request(
                "POST",
                "/v1/chat/completions",
                &[("authorization", &auth)],
                Some(&body),
            ),
        )
        .await
    }

    /// Waits (up to `limit`) until `done` holds, polling.
    async fn until(&self, what: &str, limit: Duration, mut done: impl FnMut(&Self) -> bool) {
        let deadline = std::time::Instant::now() + limit;
        while !done(self) {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}\n{}",
                self.gateway.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

both_modes! {
    async fn temporary_keys_from_sts_sign_requests_are_renewed_and_an_expired_one_answers_502(mode: Mode) {
        let rig = start(mode);
        let reply = rig.chat().await;
        assert_eq!(reply.status, 200, "{}\n{}", reply.text(), rig.bedrock.logs());
        let seen = rig.bedrock.last();
        assert!(seen.get("error").is_none(), "botocore refused the signature: {seen}");
        assert!(seen["headers"]["authorization"].as_str().unwrap()
            .starts_with(&format!("AWS4-HMAC-SHA256 Credential={ACCESS_KEY_ID}/")));
        assert_eq!(seen["headers"]["x-amz-security-token"], SESSION_TOKEN);
        let sts = rig.bedrock.events("sts");
        let first = &sts[0];
        assert_eq!(first["status"], 200, "{first}");
        assert_eq!(first["signed"], false);
        assert_eq!(first["content_type"], "application/x-www-form-urlencoded");
        assert_eq!(first["params"], json!({"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15",
            "RoleArn": ROLE, "RoleSessionName": "aisix-e2e", "WebIdentityToken": WEB_TOKEN}));

        // Renewed off the request path before the keys expire.
        rig.until("the keys were never renewed", Duration::from_secs(30),
            |rig| rig.bedrock.events("sts").len() >= 2).await;
        let reply = rig.chat().await;
        assert_eq!(reply.status, 200, "{}", reply.text());

        // The token file rotates to a token STS refuses: it is read again, the renewal fails
        // and is counted, and once the keys expire requests answer 502 without a secret.
        std::fs::write(rig.token_file.path(), "eyJ.rotated-but-unknown.sig").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let refused = loop {
            let reply = rig.chat().await;
            if reply.status != 200 {
                break reply;
            }
            assert!(std::time::Instant::now() < deadline, "the expired keys were never refused");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(refused.status, 502, "{}", refused.text());
        let message = refused.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains("no valid credential for provider key 'aws-wi'"), "{message}");
        for secret in [SECRET_KEY, SESSION_TOKEN, "rotated-but-unknown", WEB_TOKEN] {
            assert!(!refused.text().contains(secret), "{message}");
            assert!(!rig.gateway.logs().contains(secret), "a secret was logged");
        }
        let refusals = rig.bedrock.events("sts");
        assert!(refusals.iter().any(|call| call["status"] == 400
            && call["params"]["WebIdentityToken"] == "eyJ.rotated-but-unknown.sig"), "{refusals:?}");
        let page = client::get(rig.gateway.metrics_addr.unwrap(), "/metrics").await.text();
        assert!(prom::sample(&page, "aisix_credential_refresh_failures_total", &[("provider", "aws-wi")]) >= 1.0, "{page}");

        // The right token back: a retry gets keys and requests succeed again.
        std::fs::write(rig.token_file.path(), WEB_TOKEN).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            if rig.chat().await.status == 200 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no new keys after the token came back");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// moto in server mode (its STS), on an ephemeral 127.0.0.1 port; stopped on drop.
struct Moto {
    child: std::process::Child,
    port: u16,
}

impl Moto {
    fn start() -> Moto {
        use std::io::BufRead;
        const SERVE: &str = "from moto.server import ThreadedMotoServer\n\
            import sys\n\
            server = ThreadedMotoServer(ip_address='127.0.0.1', port=0, verbose=False)\n\
            server.start()\n\
            print(server.get_host_and_port()[1], flush=True)\n\
            sys.stdin.read()\n";
        let mut child = std::process::Command::new(aisix_e2e::sdk::python())
            .args(["-c", SERVE])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start moto (bash scripts/setup-python.sh)");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("moto did not start: {line:?}"));
        Moto { child, port }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

both_modes! {
    async fn the_sts_request_is_one_moto_accepts_and_its_answer_signs_requests(mode: Mode) {
        let moto = Moto::start();
        let bedrock = BedrockMock::start(AwsCredentials {
            access_key_id: ACCESS_KEY_ID,
            secret_access_key: SECRET_KEY,
            session_token: Some(SESSION_TOKEN),
            region: "us-west-2",
        });
        let token_file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(token_file.path(), WEB_TOKEN).unwrap();
        let resources = format!(
            "_format_version: \"1\"\nprovider_keys:\n  - {{display_name: aws-wi, provider: bedrock, region: us-west-2, api_base: {}}}\n\
             models:\n  - {{display_name: claude, provider: bedrock, model_name: \"{CLAUDE}\", provider_key: aws-wi}}\n\
             api_keys:\n  - {{display_name: client, key_env: CLIENT_KEY, allowed_models: [\"*\"]}}\n",
            bedrock.base_url()
        );
        let gateway = Gateway::start(
            &GatewayConfig::new(mode)
                .resources(resources)
                .env("CLIENT_KEY", CLIENT_KEY)
                .env("AWS_ACCESS_KEY_ID", "")
                .env("AWS_ROLE_ARN", ROLE)
                .env("AWS_WEB_IDENTITY_TOKEN_FILE", token_file.path().to_str().unwrap())
                .env("AWS_ENDPOINT_URL_STS", &format!("http://127.0.0.1:{}", moto.port)),
        );
        let auth = format!("Bearer {CLIENT_KEY}");
        let body = json!({"model": "claude", "messages": [{"role": "user", "content": "Hello there"}]}).to_string();
        let reply = client::send(gateway.addr(), request("POST", "/v1/chat/completions", &[("authorization", &auth)], Some(&body))).await;
        // moto's keys are its own, unknown to the Bedrock stand-in (AWS's 403); what matters is
        // that the request was signed with temporary keys moto issued.
        assert_ne!(reply.status, 502, "no keys from moto: {}\n{}", reply.text(), gateway.logs());
        let seen = bedrock.last();
        let authorization = seen["headers"]["authorization"].as_str().unwrap();
        assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential=ASIA"), "{authorization}");
        assert!(!seen["headers"]["x-amz-security-token"].as_str().unwrap().is_empty());
        assert_eq!(seen["error"], "UnrecognizedClientException", "{seen}");
    }
}
