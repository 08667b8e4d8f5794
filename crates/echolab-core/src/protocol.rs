//! The echo protocol shared by `echo-server` and `echo-bench`.
//!
//! - Echo mode: the server writes back exactly the bytes it read, in order.
//! - Reply mode (`echo-server --reply-bytes N`, seed 004's "activelink" server): a request is
//!   any run of bytes ending in `\n`; for each `\n` received the server writes [`reply_body`]`(N)`.
//!   The client sends [`DEFAULT_PAYLOAD`]'s size (which ends in `\n`) and reads N bytes back.
//!
//! # Stamps
//!
//! Every connection sending the same bytes would let a server that hands one connection
//! another's data (the buffer-id bug class of io_uring servers) pass the echo check. So
//! echo-bench stamps each request with its connection's id and the request's sequence number
//! ([`stamp`]), at the same size: a payload is [`payload`]`(n)`, the seed payload repeated in
//! blocks of 12 bytes, and every block that has room for a whole stamp ([`STAMP_LEN`], 10
//! bytes) carries one in place of its `hello echo`, keeping its `\r\n`. The default payload
//! is thus one stamp and `\r\n`: `"00070000a3\r\n"` is connection 7's request number 363
//! (both in base 36, lower-case, fixed width). A stamp has no `\r` or `\n`, so a stamped
//! payload ends requests in reply mode exactly where the unstamped one does, and the server
//! needs to know nothing of stamps.
//!
//! An echo whose bytes differ from what its connection sent, but that has the shape of some
//! stamped payload ([`is_stamped_shape`]: the seed's bytes outside the stamps, base-36 digits
//! inside), is another request's: another connection's, or an earlier one of the same
//! connection. echo-bench counts it as `foreign_echo`, apart from damaged bytes (`mismatch`).
//!
//! A payload shorter than [`STAMP_LEN`] (echo-bench's `--payload-size` below 10, the
//! connect storm's 1-byte proof) carries no stamp: it is the seed payload cut short, the same
//! on every connection, so an echo handed to the wrong connection passes its check there.
//! Only the whole blocks and a last block of at least 10 bytes are stamped, so the bytes of a
//! last block shorter than that are the seed's on every connection too. In reply mode the
//! reply is the same for every request, so a stamp cannot show whose it is.

/// The seeds' request payload: 12 bytes, `"hello echo\r\n"` (seed 000, echo-kp-bench).
pub const DEFAULT_PAYLOAD: &[u8; 12] = b"hello echo\r\n";

/// The byte that ends a request in reply mode.
pub const REQUEST_END: u8 = b'\n';

/// Base-36 digits of a stamp's connection id: ids are taken modulo 36^4 = 1,679,616, more than
/// echo-bench's connection limit (1,000,000), so that every connection of a run has its own.
pub const CONN_DIGITS: usize = 4;

/// Base-36 digits of a stamp's sequence number: a connection's requests are numbered modulo
/// 36^6 = 2,176,782,336, so a stale echo is told from the current one unless it is that many
/// requests old.
pub const SEQ_DIGITS: usize = 6;

/// Bytes of one stamp: the connection id's digits, then the sequence number's.
pub const STAMP_LEN: usize = CONN_DIGITS + SEQ_DIGITS;

/// The block a payload repeats, each one's first [`STAMP_LEN`] bytes its stamp.
const BLOCK: usize = DEFAULT_PAYLOAD.len();

/// A stamp's digits: `0-9a-z`, none of them `\r` or `\n`, none upper-case (a bit flip of
/// 0x20, the case bit, turns a letter into a byte no stamp has).
const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// The reply to one request in reply mode: `n` bytes cycling through `a..z`, so that a client
/// can verify both length and content. Empty when `n` is 0.
pub fn reply_body(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

/// A request payload of `n` bytes for echo mode: the seed payload repeated and cut to length,
/// so the default size gives exactly [`DEFAULT_PAYLOAD`]. Unstamped: [`stamp`] makes it one
/// connection's.
pub fn payload(n: usize) -> Vec<u8> {
    DEFAULT_PAYLOAD.iter().copied().cycle().take(n).collect()
}

/// Whether a payload of `n` bytes carries a stamp (`n >= STAMP_LEN`).
pub fn carries_stamp(n: usize) -> bool {
    n >= STAMP_LEN
}

/// Writes connection `conn`'s stamp for its request number `seq` (each modulo its digits'
/// range) into `payload`, a [`payload`]`(payload.len())` or one stamped before, in every block
/// with room for it; a payload shorter than [`STAMP_LEN`] is left as it is. Writes in place,
/// without allocating.
pub fn stamp(payload: &mut [u8], conn: u64, seq: u64) {
    let mut s = [0u8; STAMP_LEN];
    encode(&mut s[..CONN_DIGITS], conn);
    encode(&mut s[CONN_DIGITS..], seq);
    for block in payload.chunks_mut(BLOCK) {
        if let Some(head) = block.get_mut(..STAMP_LEN) {
            head.copy_from_slice(&s);
        }
    }
}

/// The (connection id, sequence number) of a stamped payload's first stamp; `None` when
/// `payload` is shorter than a stamp or its first bytes are not one.
pub fn read_stamp(payload: &[u8]) -> Option<(u64, u64)> {
    let s = payload.get(..STAMP_LEN)?;
    Some((decode(&s[..CONN_DIGITS])?, decode(&s[CONN_DIGITS..])?))
}

/// Whether `chunk`, found at byte `offset` of the echo of an `n`-byte payload, can be part of
/// some connection's stamped payload: the seed payload's bytes outside the stamps, stamp
/// digits inside. A chunk that differs from what its connection sent and passes this differs
/// only in stamp digits: it is another request's echo. Bytes past `n` never pass.
pub fn is_stamped_shape(offset: usize, chunk: &[u8], n: usize) -> bool {
    chunk.iter().enumerate().all(|(i, &b)| {
        let at = offset + i;
        let in_block = at % BLOCK;
        let stamped = in_block < STAMP_LEN && at - in_block + STAMP_LEN <= n;
        at < n
            && if stamped {
                DIGITS.contains(&b)
            } else {
                b == DEFAULT_PAYLOAD[in_block]
            }
    })
}

/// Writes `value` modulo 36^len into `out` as base-36 digits, most significant first.
fn encode(out: &mut [u8], mut value: u64) {
    for d in out.iter_mut().rev() {
        *d = DIGITS[(value % 36) as usize];
        value /= 36;
    }
}

/// The value of base-36 digits written by [`encode`].
fn decode(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |acc, &d| {
        let v = DIGITS.iter().position(|&x| x == d)? as u64;
        Some(acc * 36 + v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_of_default_size_is_the_seed_payload() {
        assert_eq!(payload(12), DEFAULT_PAYLOAD.to_vec());
        assert_eq!(payload(3), b"hel".to_vec());
        assert_eq!(reply_body(28)[25..], *b"zab");
    }

    #[test]
    fn a_stamp_names_the_connection_and_the_request_in_fixed_width_base_36() {
        let mut p = payload(12);
        stamp(&mut p, 7, 363);
        assert_eq!(p, b"00070000a3\r\n");
        assert_eq!(read_stamp(&p), Some((7, 363)));
        // Restamping in place replaces the previous stamp.
        stamp(&mut p, 999_999, 2_176_782_335);
        assert_eq!(p, b"lflrzzzzzz\r\n");
        assert_eq!(read_stamp(&p), Some((999_999, 2_176_782_335)));
        // Each field wraps at its width: id 36^4 is id 0's stamp.
        stamp(&mut p, 36u64.pow(4) + 1, 36u64.pow(6));
        assert_eq!(read_stamp(&p), Some((1, 0)));
        assert_eq!(read_stamp(b"0001"), None);
        assert_eq!(read_stamp(b"0001 00000\r\n"), None);
    }

    #[test]
    fn stamps_keep_the_size_and_every_line_end_of_the_seed_payload() {
        for n in 0..100 {
            let seed = payload(n);
            let mut p = seed.clone();
            stamp(&mut p, 1234, 56789);
            assert_eq!(p.len(), n);
            for (i, (&a, &b)) in seed.iter().zip(&p).enumerate() {
                if a == b'\r' || a == b'\n' || b == b'\r' || b == b'\n' {
                    assert_eq!(a, b, "n={n}, byte {i}");
                }
            }
            // A stamp in every block with room for one, the seed's bytes elsewhere.
            let stamped = (0..n).step_by(12).filter(|b| *b + STAMP_LEN <= n).count();
            let changed = seed.iter().zip(&p).filter(|(a, b)| a != b).count();
            assert_eq!(changed > 0, stamped > 0, "n={n}");
            assert_eq!(carries_stamp(n), stamped > 0, "n={n}");
            assert!(is_stamped_shape(0, &p, n), "n={n}");
        }
        // Too short for a stamp: the seed's bytes.
        let mut short = payload(9);
        stamp(&mut short, 5, 5);
        assert_eq!(short, b"hello ech");
    }

    #[test]
    fn another_requests_echo_has_the_shape_damaged_bytes_do_not() {
        let n = 30;
        let mut mine = payload(n);
        stamp(&mut mine, 3, 10);
        let mut other = payload(n);
        stamp(&mut other, 4, 10);
        let mut stale = payload(n);
        stamp(&mut stale, 3, 9);
        for echo in [&other, &stale] {
            assert_ne!(echo, &mine);
            assert!(is_stamped_shape(0, echo, n));
            // Chunk by chunk too, wherever a read splits it.
            assert!(is_stamped_shape(5, &echo[5..17], n));
        }
        let mut flipped = mine.clone();
        flipped[0] ^= 0x20;
        assert!(!is_stamped_shape(0, &flipped, n));
        // A letter with its case bit flipped is no digit either.
        stamp(&mut flipped, 35, 0);
        flipped[3] ^= 0x20;
        assert!(!is_stamped_shape(0, &flipped, n));
        // Outside the stamps only the seed's bytes pass: "\r\n", and the unstamped tail.
        assert!(!is_stamped_shape(10, b"\n\r", n));
        assert!(is_stamped_shape(24, b"hello ", n));
        assert!(!is_stamped_shape(24, b"000000", n));
        // Past the payload's end nothing passes: an overrun is damage.
        assert!(!is_stamped_shape(n - 1, &mine[n - 1..].repeat(2), n));
        // The unstamped seed payload is not a stamped one: its space is not a digit.
        assert!(!is_stamped_shape(0, &payload(12), 12));
    }
}
