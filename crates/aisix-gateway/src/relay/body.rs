//! The one response body type every route returns, so the serving core needs no boxing.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::relay::stream::SseRelay;
use crate::relay::unary::{Cut, Polled, UnaryRelay};

/// A response body: a whole buffer, a relayed upstream event stream, or a relayed whole
/// upstream answer (the only one that can fail: it is [`Cut`] when the upstream's breaks).
#[derive(Debug)]
pub enum GatewayBody {
    Full(Option<Bytes>),
    Sse(Box<SseRelay>),
    Unary(Box<UnaryRelay>),
}

impl GatewayBody {
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        GatewayBody::Full(Some(bytes.into()))
    }
}

impl Body for GatewayBody {
    type Data = Bytes;
    type Error = Cut;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        match self.get_mut() {
            GatewayBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            GatewayBody::Sse(relay) => Pin::new(relay.as_mut())
                .poll_frame(cx)
                .map(|frame| frame.map(|f| f.map_err(|never| match never {}))),
            GatewayBody::Unary(relay) => Pin::new(relay.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            GatewayBody::Full(bytes) => bytes.is_none(),
            GatewayBody::Sse(relay) => relay.is_end_stream(),
            GatewayBody::Unary(relay) => relay.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GatewayBody::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            GatewayBody::Full(None) => SizeHint::with_exact(0),
            GatewayBody::Sse(_) => SizeHint::default(),
            GatewayBody::Unary(relay) => relay.size_hint(),
        }
    }
}
