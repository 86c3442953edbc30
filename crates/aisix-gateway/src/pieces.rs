//! Body bytes gathered piece by piece (a request body as it is read, an upstream body, a
//! stream's events for one write to the client), copied only when there is more than one.

use bytes::{Bytes, BytesMut};

/// Bytes gathered for one write: the first piece kept as it came (no copy for the common case
/// of one frame), later ones appended.
#[derive(Default)]
pub(crate) struct Pieces {
    first: Option<Bytes>,
    more: BytesMut,
}

impl Pieces {
    pub(crate) fn push(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        match self.first.take() {
            None if self.more.is_empty() => self.first = Some(bytes),
            first => {
                if let Some(first) = first {
                    self.more.extend_from_slice(&first);
                }
                self.more.extend_from_slice(&bytes);
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none() && self.more.is_empty()
    }

    pub(crate) fn last(&self) -> Option<u8> {
        match &self.first {
            Some(first) => first.last().copied(),
            None => self.more.last().copied(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.first.as_ref().map_or(0, Bytes::len) + self.more.len()
    }

    pub(crate) fn take(&mut self) -> Bytes {
        self.first
            .take()
            .unwrap_or_else(|| self.more.split().freeze())
    }
}
