//! `/`, `/livez` and `/readyz`, answered without touching configuration or upstreams.

use http::{HeaderValue, Response, StatusCode, header};

use crate::relay::body::GatewayBody;

pub(crate) fn livez() -> Response<GatewayBody> {
    text(StatusCode::OK, "ok\n")
}

/// `/`: one line naming the gateway, for clients that probe the origin before they start.
pub(crate) fn root() -> Response<GatewayBody> {
    text(StatusCode::OK, "aisix\n")
}

pub(crate) fn readyz(ready: bool) -> Response<GatewayBody> {
    if ready {
        text(StatusCode::OK, "ready\n")
    } else {
        text(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<GatewayBody> {
    let mut response = Response::new(GatewayBody::full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
