//! AWS web-identity credentials, as EKS gives a pod (`AWS_ROLE_ARN` and
//! `AWS_WEB_IDENTITY_TOKEN_FILE`): STS `AssumeRoleWithWebIdentity` (the query API, version
//! 2011-06-15, unsigned) exchanges the token file's token for temporary keys, made a
//! [`Signer`]. The token file is read at every fetch (EKS rotates it). A [`Source`] of
//! [`super::credential`]: when to fetch is that module's.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_smithy_types::DateTime;
use aws_smithy_types::date_time::Format;
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};

use super::credential::{Fetching, Fresh, Source};
use super::uris::percent_encoded;
use crate::upstream::egress::{Egress, Route};
use crate::upstream::pool::Pool;
use crate::upstream::sigv4::Signer;

/// How long one STS request may take, connecting included.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest STS answer read (a few KiB).
const MAX_ANSWER: usize = 64 * 1024;
/// The session name when `AWS_ROLE_SESSION_NAME` gives none.
const SESSION_NAME: &str = "aisix";

/// A web identity's settings, read from the environment when the snapshot is built; a reload
/// that reads the same keeps the credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WebIdentity {
    pub role_arn: String,
    pub token_file: PathBuf,
    pub session_name: String,
    /// STS: `AWS_ENDPOINT_URL_STS`, else `https://sts.{region}.amazonaws.com`.
    pub endpoint: String,
    /// The Bedrock region the keys sign for.
    pub region: String,
}

impl WebIdentity {
    /// The web identity the environment names, for a key in `region`: `AWS_ROLE_ARN` and
    /// `AWS_WEB_IDENTITY_TOKEN_FILE` both set (and not empty).
    pub(crate) fn from_env(region: &str) -> Option<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Some(Self {
            role_arn: var("AWS_ROLE_ARN")?,
            token_file: var("AWS_WEB_IDENTITY_TOKEN_FILE")?.into(),
            session_name: var("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| SESSION_NAME.to_owned()),
            endpoint: var("AWS_ENDPOINT_URL_STS")
                .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com")),
            region: region.to_owned(),
        })
    }
}

/// The temporary keys of one web identity.
pub(crate) struct AssumedRole {
    settings: WebIdentity,
    endpoint: Result<Uri, String>,
    route: Route,
}

impl AssumedRole {
    pub(crate) fn new(settings: &WebIdentity, egress: &Egress) -> Self {
        let endpoint = settings.endpoint.parse::<Uri>().map_err(|_| {
            format!(
                "the STS endpoint '{}' is not a valid URI",
                settings.endpoint
            )
        });
        let route = endpoint
            .as_ref()
            .map_or(Route::Direct, |uri| egress.route(uri));
        Self {
            settings: settings.clone(),
            endpoint,
            route,
        }
    }

    async fn assume(&self, pool: &Pool) -> Result<Fresh<Arc<Signer>>, String> {
        let uri = self.endpoint.as_ref().map_err(Clone::clone)?;
        let file = self.settings.token_file.display();
        let token = std::fs::read_to_string(&self.settings.token_file)
            .map_err(|e| format!("the web identity token file {file} could not be read: {e}"))?;
        let token = token.trim();
        if token.is_empty() {
            return Err(format!("the web identity token file {file} is empty"));
        }
        let form = format!(
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn={}&RoleSessionName={}&WebIdentityToken={}",
            percent_encoded(&self.settings.role_arn),
            percent_encoded(&self.settings.session_name),
            percent_encoded(token),
        );
        let mut request = Request::new(Full::new(Bytes::from(form)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri.clone();
        request.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        let exchange = async {
            let (response, _lease) = pool
                .send(request, &self.route, TIMEOUT)
                .await
                .map_err(|e| format!("STS could not be reached: {e}"))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| format!("the STS answer could not be read: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| format!("STS did not answer within {TIMEOUT:?}"))??;
        let body = String::from_utf8_lossy(&body);
        if !status.is_success() {
            return Err(format!("STS answered {status}: {}", sts_error(&body)));
        }
        let keys = parse_answer(&body)?;
        let lifetime = keys
            .expiration
            .duration_since(SystemTime::now())
            .map_err(|_| "STS answered credentials that have already expired".to_owned())?;
        let signer = Signer::new(
            &keys.access_key_id,
            &keys.secret_access_key,
            Some(&keys.session_token),
            &self.settings.region,
            "bedrock",
        );
        Ok(Fresh {
            value: Arc::new(signer),
            lifetime,
        })
    }
}

impl Source<Arc<Signer>> for AssumedRole {
    fn fetch<'a>(&'a self, pool: &'a Pool) -> Fetching<'a, Arc<Signer>> {
        Box::pin(self.assume(pool))
    }
}

/// The keys of an `AssumeRoleWithWebIdentityResponse`.
#[derive(Debug, PartialEq)]
struct TemporaryKeys {
    access_key_id: String,
    secret_access_key: String,
    session_token: String,
    expiration: SystemTime,
}

/// The text of the first `<tag>…</tag>` in `xml`, its entities decoded.
fn element(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&close)?;
    Some(
        xml[start..end]
            .trim()
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

/// The `Credentials` of a successful answer.
fn parse_answer(xml: &str) -> Result<TemporaryKeys, String> {
    let credentials = element(xml, "Credentials")
        .ok_or_else(|| "the STS answer has no Credentials".to_owned())?;
    let field = |tag: &str| {
        element(&credentials, tag)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("the STS answer's Credentials have no {tag}"))
    };
    let expiration = field("Expiration")?;
    let expiration = DateTime::from_str(&expiration, Format::DateTime)
        .ok()
        .and_then(|t| SystemTime::try_from(t).ok())
        .ok_or_else(|| "the STS answer's Expiration is not a date-time".to_owned())?;
    Ok(TemporaryKeys {
        access_key_id: field("AccessKeyId")?,
        secret_access_key: field("SecretAccessKey")?,
        session_token: field("SessionToken")?,
        expiration,
    })
}

/// An STS error answer's code and message (they name no secret), or that it had none.
fn sts_error(xml: &str) -> String {
    match (element(xml, "Code"), element(xml, "Message")) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code,
        _ => "an answer that is not an STS error".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's documented example answer (STS API reference, AssumeRoleWithWebIdentity).
    const ANSWER: &str = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>amzn1.account.AF6RHO7KZU5XRVQJGXK6HB56KR2A</SubjectFromWebIdentityToken>
    <Audience>client.5498841531868486423.1548@apps.example.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/FederatedWebIdentityRole/app1</Arn>
      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:app1</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE</SessionToken>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY</SecretAccessKey>
      <Expiration>2014-10-24T23:00:23Z</Expiration>
      <AccessKeyId>ASgeIAIOSFODNN7EXAMPLE</AccessKeyId>
    </Credentials>
    <SourceIdentity>SourceIdentityValue</SourceIdentity>
    <Provider>www.amazon.com</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata>
    <RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId>
  </ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#;

    #[test]
    fn the_documented_answer_gives_its_keys_and_expiration() {
        let keys = parse_answer(ANSWER).unwrap();
        assert_eq!(keys.access_key_id, "ASgeIAIOSFODNN7EXAMPLE");
        assert_eq!(
            keys.secret_access_key,
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
        );
        assert_eq!(
            keys.session_token,
            "AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE"
        );
        assert_eq!(
            keys.expiration,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_414_191_623)
        );
    }

    #[test]
    fn an_expiration_with_fractional_seconds_is_read() {
        let answer = ANSWER.replace("2014-10-24T23:00:23Z", "2014-10-24T23:00:23.500Z");
        let keys = parse_answer(&answer).unwrap();
        assert_eq!(
            keys.expiration,
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_414_191_623_500)
        );
    }

    #[test]
    fn entities_in_a_value_are_decoded() {
        let answer = ANSWER.replace("+IEXAMPLE", "&amp;IEXAMPLE&lt;");
        let keys = parse_answer(&answer).unwrap();
        assert!(keys.session_token.ends_with("&IEXAMPLE<"));
    }

    #[test]
    fn an_answer_missing_a_key_says_which() {
        let answer = ANSWER
            .replace("<SessionToken>", "<Other>")
            .replace("</SessionToken>", "</Other>");
        assert_eq!(
            parse_answer(&answer).unwrap_err(),
            "the STS answer's Credentials have no SessionToken"
        );
        assert_eq!(
            parse_answer("<html>no</html>").unwrap_err(),
            "the STS answer has no Credentials"
        );
    }

    #[test]
    fn a_bad_expiration_is_refused() {
        let answer = ANSWER.replace("2014-10-24T23:00:23Z", "tomorrow");
        assert_eq!(
            parse_answer(&answer).unwrap_err(),
            "the STS answer's Expiration is not a date-time"
        );
    }

    #[test]
    fn an_sts_error_gives_its_code_and_message() {
        let error = r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error><Type>Sender</Type><Code>InvalidIdentityToken</Code><Message>Couldn't retrieve verification key from your identity provider</Message></Error>
  <RequestId>1</RequestId></ErrorResponse>"#;
        assert_eq!(
            sts_error(error),
            "InvalidIdentityToken: Couldn't retrieve verification key from your identity provider"
        );
        assert_eq!(sts_error("<html/>"), "an answer that is not an STS error");
    }
}
