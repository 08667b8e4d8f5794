//! Reply mode's output (`--reply-bytes N`, seed 004's "activelink" server) for the models that
//! do not buffer input: every '\n' a client sends makes the server owe it one
//! [`reply_body`]`(N)`. Only a count of owed bytes is kept per connection, so a client that
//! sends many requests without reading costs no memory; the bytes themselves come from one
//! shared [`ReplyBody`].

use echolab_core::protocol::{reply_body, REQUEST_END};

/// Bytes of replies laid end to end in a [`ReplyBody`], so that one write can carry many small
/// replies (at least one reply, whatever its size).
const BODY_TARGET_BYTES: usize = 64 << 10;

/// `reply_body(n)` repeated back to back (at least once, about 64 KiB in all), shared read-only
/// by every connection of a model.
#[derive(Debug)]
pub(crate) struct ReplyBody {
    bytes: Box<[u8]>,
    reply_len: usize,
}

impl ReplyBody {
    /// The body for replies of `reply_len` bytes (`--reply-bytes`); 0 means empty replies.
    pub(crate) fn new(reply_len: usize) -> Self {
        let copies = BODY_TARGET_BYTES
            .checked_div(reply_len)
            .map_or(0, |n| n.max(1));
        let one = reply_body(reply_len);
        let bytes = one
            .iter()
            .copied()
            .cycle()
            .take(copies * reply_len)
            .collect();
        Self { bytes, reply_len }
    }
}

/// What reply mode owes one connection: `left` bytes, starting `phase` bytes into a reply.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owed {
    phase: usize,
    left: u64,
}

impl Owed {
    /// Adds one reply per request terminator (`'\n'`) in `input`.
    pub(crate) fn add_requests(&mut self, body: &ReplyBody, input: &[u8]) {
        let requests = input.iter().filter(|&&b| b == REQUEST_END).count() as u64;
        self.left += requests * body.reply_len as u64;
    }

    /// Bytes still owed.
    pub(crate) fn left(&self) -> u64 {
        self.left
    }

    /// The next bytes to write (empty when nothing is owed): a prefix of what is owed, from
    /// `body`, which must be the body the requests were counted with.
    pub(crate) fn next<'b>(&self, body: &'b ReplyBody) -> &'b [u8] {
        let end = body
            .bytes
            .len()
            .min(self.phase + usize::try_from(self.left).unwrap_or(usize::MAX));
        &body.bytes[self.phase.min(end)..end]
    }

    /// Records that the first `written` bytes of [`Owed::next`] reached the socket.
    pub(crate) fn consume(&mut self, body: &ReplyBody, written: usize) {
        debug_assert!(written as u64 <= self.left);
        self.left -= written as u64;
        self.phase = (self.phase + written) % body.reply_len.max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drains `owed` in writes of at most `step` bytes, as a socket taking partial writes would.
    fn drain(owed: &mut Owed, body: &ReplyBody, step: usize) -> Vec<u8> {
        let mut out = Vec::new();
        while owed.left() > 0 {
            let chunk = owed.next(body);
            let take = chunk.len().min(step);
            out.extend_from_slice(&chunk[..take]);
            owed.consume(body, take);
        }
        out
    }

    #[test]
    fn each_newline_owes_one_reply_even_across_partial_writes() {
        let body = ReplyBody::new(1000);
        let mut owed = Owed::default();
        owed.add_requests(&body, b"hello echo\r\nhello");
        owed.add_requests(&body, b" echo\r\n\n");
        assert_eq!(owed.left(), 3000);
        let out = drain(&mut owed, &body, 333);
        assert_eq!(out, reply_body(1000).repeat(3));
        assert_eq!(owed.next(&body), b"");
    }

    #[test]
    fn many_small_replies_come_out_in_large_slices() {
        let body = ReplyBody::new(7);
        let mut owed = Owed::default();
        owed.add_requests(&body, &[b'\n'; 20_000]);
        assert!(
            owed.next(&body).len() > 7 * 1000,
            "one write carries many replies"
        );
        assert_eq!(
            drain(&mut owed, &body, usize::MAX),
            reply_body(7).repeat(20_000)
        );
    }

    #[test]
    fn zero_byte_replies_owe_nothing() {
        let body = ReplyBody::new(0);
        let mut owed = Owed::default();
        owed.add_requests(&body, b"a\nb\n");
        assert_eq!((owed.left(), owed.next(&body)), (0, &b""[..]));
    }

    #[test]
    fn input_without_newline_owes_nothing() {
        let body = ReplyBody::new(5);
        let mut owed = Owed::default();
        owed.add_requests(&body, b"no terminator");
        assert_eq!(owed.left(), 0);
    }
}
