//! An Amazon Bedrock runtime stand-in checked by AWS's own botocore
//! (`e2e/python/bedrock_asgi_app.py`), served by uvicorn: it recomputes every request's SigV4
//! signature with botocore's signer, checks every body against botocore's bedrock-runtime
//! model, and decodes every event-stream message with botocore before sending it.

use std::ops::Deref;

use super::recorded::RecordedApp;

/// The AWS credentials and region the stand-in accepts.
#[derive(Debug, Clone, Copy)]
pub struct AwsCredentials<'a> {
    pub access_key_id: &'a str,
    pub secret_access_key: &'a str,
    pub session_token: Option<&'a str>,
    pub region: &'a str,
}

/// The running app, stopped on drop.
pub struct BedrockMock(RecordedApp);

impl BedrockMock {
    /// Starts the app, accepting only requests signed with `credentials`.
    pub fn start(credentials: AwsCredentials<'_>) -> BedrockMock {
        Self::start_with_sts(credentials, None)
    }

    /// Starts the app, which is also STS for web identities when `sts` is
    /// `Some((token, lifetime_secs))`: `AssumeRoleWithWebIdentity` with `token` answers
    /// `credentials`, expiring after `lifetime_secs`.
    pub fn start_with_sts(
        credentials: AwsCredentials<'_>,
        sts: Option<(&str, &str)>,
    ) -> BedrockMock {
        let mut env = vec![
            ("BEDROCK_ACCESS_KEY_ID", credentials.access_key_id),
            ("BEDROCK_SECRET_ACCESS_KEY", credentials.secret_access_key),
            ("BEDROCK_REGION", credentials.region),
        ];
        if let Some(token) = credentials.session_token {
            env.push(("BEDROCK_SESSION_TOKEN", token));
        }
        if let Some((token, lifetime)) = sts {
            env.push(("BEDROCK_WEB_IDENTITY_TOKEN", token));
            env.push(("BEDROCK_STS_LIFETIME", lifetime));
        }
        BedrockMock(RecordedApp::start(
            "bedrock mock (uvicorn)",
            "bedrock_asgi_app",
            "BEDROCK_RECORD",
            &env,
        ))
    }

    /// The provider `api_base`: `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.0.addr)
    }
}

impl Deref for BedrockMock {
    type Target = RecordedApp;

    fn deref(&self) -> &RecordedApp {
        &self.0
    }
}
