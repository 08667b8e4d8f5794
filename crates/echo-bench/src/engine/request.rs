//! One connection's request, stamped with whose it is, and the check of what comes back.
//!
//! Each connection keeps its own copy of the plan's request (made once, when the connection
//! is) and stamps it in place before every request with its id and the request's sequence
//! number (`echolab_core::protocol::stamp`), so a request costs no allocation. A reply is
//! checked chunk by chunk as it arrives: bytes equal to what is owed pass; in echo mode, bytes
//! that differ but have the shape of a stamped payload are another request's echo, another
//! connection's or a stale one of this connection ([`FailureKind::ForeignEcho`]); anything
//! else is damage ([`FailureKind::Mismatch`]).

use echolab_core::protocol;

use super::{Plan, Reply};
use crate::recorder::FailureKind;

/// One connection's request bytes and sequence number.
#[derive(Debug)]
pub(crate) struct Request {
    /// The plan's request with this connection's current stamp.
    bytes: Box<[u8]>,
    /// The connection's global id, the stamp's first field.
    conn: u64,
    /// The sequence number the next request gets.
    next_seq: u64,
}

impl Request {
    /// Connection `conn`'s copy of `plan`'s request, not yet stamped ([`Request::next`]).
    pub(crate) fn new(plan: &Plan, conn: usize) -> Self {
        Self {
            bytes: plan.request.clone().into_boxed_slice(),
            conn: conn as u64,
            next_seq: 0,
        }
    }

    /// Stamps the next request (the first is number 0), in place.
    pub(crate) fn next(&mut self) {
        protocol::stamp(&mut self.bytes, self.conn, self.next_seq);
        self.next_seq = self.next_seq.wrapping_add(1);
    }

    /// The current request's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Checks `chunk`, the reply's bytes from `offset` on (at most what is owed), against what
    /// `reply` says the current request must get back.
    ///
    /// # Errors
    /// [`FailureKind::ForeignEcho`] for another request's echo, [`FailureKind::Mismatch`] for
    /// any other difference.
    pub(crate) fn check(
        &self,
        reply: &Reply,
        offset: usize,
        chunk: &[u8],
    ) -> Result<(), FailureKind> {
        let expected = match reply {
            Reply::Echo => &self.bytes[..],
            Reply::Fixed(bytes) => &bytes[..],
        };
        if expected.get(offset..offset + chunk.len()) == Some(chunk) {
            return Ok(());
        }
        // Off the hot path: only a reply that already failed is looked at again.
        let foreign = matches!(reply, Reply::Echo)
            && protocol::is_stamped_shape(offset, chunk, self.bytes.len());
        Err(if foreign {
            FailureKind::ForeignEcho
        } else {
            FailureKind::Mismatch
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{test_plan, Stop};
    use std::time::Duration;

    fn plan(request: &[u8], reply: Reply) -> Plan {
        let mut p = test_plan(
            Stop::Rounds(1),
            Duration::ZERO,
            Duration::from_secs(1),
            1,
            2,
        );
        p.request = request.to_vec();
        p.reply = reply;
        p
    }

    #[test]
    fn each_request_is_stamped_with_its_connection_and_number() {
        let p = plan(&protocol::payload(12), Reply::Echo);
        let mut r = Request::new(&p, 7);
        r.next();
        assert_eq!(r.bytes(), b"0007000000\r\n");
        r.next();
        assert_eq!(protocol::read_stamp(r.bytes()), Some((7, 1)));
    }

    #[test]
    fn another_connections_or_a_stale_echo_is_foreign_damage_is_a_mismatch() {
        let p = plan(&protocol::payload(24), Reply::Echo);
        let (mut mine, mut other) = (Request::new(&p, 1), Request::new(&p, 2));
        mine.next();
        other.next();
        let stale = mine.bytes().to_vec();
        mine.next();
        assert_eq!(mine.check(&p.reply, 0, mine.bytes()), Ok(()));
        assert_eq!(mine.check(&p.reply, 3, &mine.bytes()[3..9]), Ok(()));
        assert_eq!(
            mine.check(&p.reply, 0, other.bytes()),
            Err(FailureKind::ForeignEcho)
        );
        assert_eq!(
            mine.check(&p.reply, 12, &stale[12..]),
            Err(FailureKind::ForeignEcho)
        );
        let mut damaged = mine.bytes().to_vec();
        damaged[0] ^= 0x20;
        assert_eq!(
            mine.check(&p.reply, 0, &damaged),
            Err(FailureKind::Mismatch)
        );
    }

    #[test]
    fn a_fixed_reply_is_only_ever_a_mismatch() {
        let body = protocol::reply_body(12);
        let p = plan(&protocol::payload(12), Reply::Fixed(body.clone()));
        let mut r = Request::new(&p, 1);
        r.next();
        assert_eq!(r.check(&p.reply, 0, &body), Ok(()));
        // Its own request echoed back is not the reply body.
        assert_eq!(r.check(&p.reply, 0, r.bytes()), Err(FailureKind::Mismatch));
    }
}
