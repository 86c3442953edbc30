//! Hooks the end-to-end tests call on the proxy port, compiled only with the `test-hooks`
//! feature (which release builds refuse): `POST /__aisix/test/advance-clock?ms=N` moves the
//! limiter's clock forward, so a test rolls windows and budget periods over without sleeping.

use std::time::Duration;

use http::{Request, Response, StatusCode};

use crate::limit::SkewedClock;
use crate::relay::body::GatewayBody;

pub(crate) const ADVANCE_CLOCK_PATH: &str = "/__aisix/test/advance-clock";

/// Moves `clock` forward by the request's `ms`; 400 without a whole number of milliseconds.
pub(crate) fn advance_clock<B>(clock: &SkewedClock, request: &Request<B>) -> Response<GatewayBody> {
    let ms = request
        .uri()
        .query()
        .and_then(|q| q.strip_prefix("ms="))
        .and_then(|ms| ms.parse::<u64>().ok());
    let mut response = Response::new(GatewayBody::full(""));
    match ms {
        Some(ms) => {
            clock.advance(Duration::from_millis(ms));
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        None => *response.status_mut() = StatusCode::BAD_REQUEST,
    }
    response
}
