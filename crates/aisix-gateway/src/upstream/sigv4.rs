//! AWS Signature Version 4 for one provider key's requests (Bedrock's service name `bedrock`),
//! with `aws-sigv4`. The credentials are fixed when the snapshot is built; signing one request
//! reads the clock (vDSO), hashes its body once and derives the day's key: no lock, no I/O.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use http::{HeaderMap, HeaderName, HeaderValue, Uri};

/// Signs requests for one region and service with one set of credentials.
pub(crate) struct Signer {
    identity: Identity,
    region: Box<str>,
    service: &'static str,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The credentials never print.
        f.debug_struct("Signer")
            .field("region", &self.region)
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

/// Why a request could not be signed (a URI without a host, a header value AWS cannot sign).
#[derive(Debug, thiserror::Error)]
#[error("the request could not be signed: {0}")]
pub(crate) struct SignError(String);

impl Signer {
    /// A signer for `service` in `region` with these static credentials.
    pub(crate) fn new(
        access_key_id: &str,
        secret_access_key: &str,
        session_token: Option<&str>,
        region: &str,
        service: &'static str,
    ) -> Self {
        let credentials = Credentials::new(
            access_key_id,
            secret_access_key,
            session_token.map(str::to_owned),
            None,
            "aisix-resources",
        );
        Self {
            identity: credentials.into(),
            region: region.into(),
            service,
        }
    }

    /// The credentials it signs with (the key id, the secret key and any session token), for
    /// an error's masks.
    pub(crate) fn secrets(&self) -> Vec<String> {
        self.identity
            .data::<Credentials>()
            .map(|c| {
                [
                    Some(c.access_key_id()),
                    Some(c.secret_access_key()),
                    c.session_token(),
                ]
                .into_iter()
                .flatten()
                .map(str::to_owned)
                .collect()
            })
            .unwrap_or_default()
    }

    /// The headers that sign a `POST` of `body` to `uri` with `content_type` at `time`:
    /// `authorization`, `x-amz-date` and, with a session token, `x-amz-security-token`, all
    /// marked sensitive. The host signed is `uri`'s authority (its default port left out), as
    /// the connection sends it.
    pub(crate) fn sign(
        &self,
        uri: &Uri,
        content_type: &'static str,
        body: &[u8],
        time: SystemTime,
    ) -> Result<HeaderMap, SignError> {
        if uri.host().is_none() {
            return Err(SignError("the URI has no host".to_owned()));
        }
        let params = v4::SigningParams::builder()
            .identity(&self.identity)
            .region(&self.region)
            .name(self.service)
            .time(time)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| SignError(e.to_string()))?
            .into();
        let uri = uri.to_string();
        let request = SignableRequest::new(
            "POST",
            uri.as_str(),
            std::iter::once(("content-type", content_type)),
            SignableBody::Bytes(body),
        )
        .map_err(|e| SignError(e.to_string()))?;
        let (instructions, _signature) = sign(request, &params)
            .map_err(|e| SignError(e.to_string()))?
            .into_parts();
        let (headers, _params) = instructions.into_parts();
        let mut signed = HeaderMap::with_capacity(headers.len());
        for header in headers {
            let mut value =
                HeaderValue::from_str(header.value()).map_err(|e| SignError(e.to_string()))?;
            value.set_sensitive(true);
            signed.insert(HeaderName::from_static(header.name()), value);
        }
        Ok(signed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The AWS SigV4 test suite's `post-x-www-form-urlencoded` shape: known credentials and
    /// time give a known signature, so a change in what is signed shows here.
    #[test]
    fn a_request_is_signed_for_its_host_content_type_and_date() {
        let signer = Signer::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
            "us-east-1",
            "bedrock",
        );
        // 2015-08-30T12:36:00Z
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160);
        let uri: Uri = "https://bedrock-runtime.us-east-1.amazonaws.com/model/m%3A0/converse"
            .parse()
            .unwrap();
        let headers = signer.sign(&uri, "application/json", b"{}", time).unwrap();
        assert_eq!(headers["x-amz-date"], "20150830T123600Z");
        let authorization = headers["authorization"].to_str().unwrap();
        assert!(
            authorization.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature="
            ),
            "{authorization}"
        );
        assert!(headers["authorization"].is_sensitive());
        assert!(!headers.contains_key("x-amz-security-token"));
    }

    #[test]
    fn a_session_token_is_sent_and_signed() {
        let signer = Signer::new("AKID", "secret", Some("the-token"), "eu-west-1", "bedrock");
        let uri: Uri = "http://127.0.0.1:8080/model/m/converse".parse().unwrap();
        let headers = signer
            .sign(&uri, "application/json", b"{}", SystemTime::now())
            .unwrap();
        assert_eq!(headers["x-amz-security-token"], "the-token");
        let authorization = headers["authorization"].to_str().unwrap();
        assert!(
            authorization
                .contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"),
            "{authorization}"
        );
        assert!(!format!("{signer:?}").contains("secret"));
    }

    #[test]
    fn a_uri_without_a_host_is_an_error_not_a_panic() {
        let signer = Signer::new("AKID", "secret", None, "us-east-1", "bedrock");
        let uri: Uri = "/model/m/converse".parse().unwrap();
        assert!(
            signer
                .sign(&uri, "application/json", b"{}", SystemTime::now())
                .is_err()
        );
    }
}
