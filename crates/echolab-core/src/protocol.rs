//! The echo protocol shared by `echo-server` and `echo-bench`.
//!
//! - Echo mode: the server writes back exactly the bytes it read, in order.
//! - Reply mode (`echo-server --reply-bytes N`, seed 004's "activelink" server): a request is
//!   any run of bytes ending in `\n`; for each `\n` received the server writes [`reply_body`]`(N)`.
//!   The client sends [`DEFAULT_PAYLOAD`] (which ends in `\n`) and reads N bytes back.

/// The seeds' request payload: 12 bytes, `"hello echo\r\n"` (seed 000, echo-kp-bench).
pub const DEFAULT_PAYLOAD: &[u8; 12] = b"hello echo\r\n";

/// The byte that ends a request in reply mode.
pub const REQUEST_END: u8 = b'\n';

/// The reply to one request in reply mode: `n` bytes cycling through `a..z`, so that a client
/// can verify both length and content. Empty when `n` is 0.
pub fn reply_body(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

/// A request payload of `n` bytes for echo mode: the seed payload repeated and cut to length,
/// so the default size gives exactly [`DEFAULT_PAYLOAD`].
pub fn payload(n: usize) -> Vec<u8> {
    DEFAULT_PAYLOAD.iter().copied().cycle().take(n).collect()
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
}
