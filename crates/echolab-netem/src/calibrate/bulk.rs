//! The goodput transfers' sockets: what a receiver counts, and how sender and receiver are set
//! up so that a transfer fills the link without overflowing its queue (Reno,
//! [`bulk_receiver`]'s window).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use echolab_core::calibration::BULK_CONGESTION_CONTROL;

/// Bytes per write in a bulk transfer.
const CHUNK: usize = 64 * 1024;

/// A receiver's measurement: bytes and time after the warm-up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Received {
    /// Bytes received after the warm-up.
    pub(crate) bytes: u64,
    /// From the end of the warm-up to the last byte.
    pub(crate) elapsed: Duration,
}

impl Received {
    /// Bits per second; 0 when nothing arrived after the warm-up.
    pub(crate) fn bits_per_s(&self) -> f64 {
        if self.elapsed.is_zero() {
            return 0.0;
        }
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64()
    }
}

/// Reads `stream` to its end, counting bytes that arrive after `warmup` from the first byte.
pub(super) fn receive_and_measure(
    stream: &mut TcpStream,
    warmup: Duration,
) -> io::Result<Received> {
    let mut buf = vec![0u8; CHUNK];
    let mut first: Option<Instant> = None;
    let mut counted = 0u64;
    let mut last = None;
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let now = Instant::now();
        let start = *first.get_or_insert(now);
        if now.duration_since(start) >= warmup {
            counted += n as u64;
            last = Some(now);
        }
    }
    let begin = first.map(|f| f + warmup);
    let elapsed = match (begin, last) {
        (Some(b), Some(l)) => l.saturating_duration_since(b),
        _ => Duration::ZERO,
    };
    Ok(Received {
        bytes: counted,
        elapsed,
    })
}

/// Makes `s` a calibration bulk sender: congestion control [`BULK_CONGESTION_CONTROL`].
///
/// # Errors
/// The kernel refused the option (the message names it).
pub(super) fn bulk_sender(s: &TcpStream) -> io::Result<()> {
    socket2::SockRef::from(s)
        .set_tcp_congestion(BULK_CONGESTION_CONTROL.as_bytes())
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("TCP_CONGESTION {BULK_CONGESTION_CONTROL}: {e}"),
            )
        })
}

/// Makes `s` a calibration bulk receiver that never offers the sender more than `window`
/// bytes; without a window, nothing changes. The receive window is at most the buffer's free
/// space times the kernel's payload-to-memory ratio (below 1), and the buffer is fixed at
/// `window` (SO_RCVBUF of half of it, which Linux doubles, socket(7); fixing it also stops
/// autotuning). `TCP_WINDOW_CLAMP` (tcp(7)) says the same once more, but alone it does not
/// hold: autotuning and a changed payload ratio reset the clamp from the buffer's size
/// (tcp_rcv_space_adjust, tcp_measure_rcv_mss), which let a 6.18 kernel offer 395 packets
/// against a 337-packet clamp. The window offered then lies between `window` and the ratio
/// times it (0.59 seen through the wire, so 199 packets at crossnet against its 86-packet
/// pipe). The kernel caps SO_RCVBUF at `net.core.rmem_max` (212,992 by default).
///
/// # Errors
/// The kernel refused an option (the message names it).
pub(super) fn bulk_receiver(s: &TcpStream, window: Option<u64>) -> io::Result<()> {
    let Some(w) = window else { return Ok(()) };
    let w = libc::c_int::try_from(w).unwrap_or(libc::c_int::MAX);
    let half = (w / 2) as usize;
    socket2::SockRef::from(s)
        .set_recv_buffer_size(half)
        .map_err(|e| io::Error::new(e.kind(), format!("SO_RCVBUF {half}: {e}")))?;
    crate::nl::set_option(s, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, &w)
        .map_err(|e| io::Error::new(e.kind(), format!("TCP_WINDOW_CLAMP {w}: {e}")))
}

/// Writes [`CHUNK`]s to `stream` for `total`, then shuts its write side (the receiver's end of
/// the transfer).
pub(super) fn send_for(stream: &mut TcpStream, total: Duration) -> io::Result<()> {
    let chunk = vec![0x5au8; CHUNK];
    let end = Instant::now() + total;
    while Instant::now() < end {
        stream.write_all(&chunk)?;
    }
    stream.shutdown(std::net::Shutdown::Write)
}

/// `s`'s congestion control.
#[cfg(test)]
pub(super) fn congestion_control(s: &TcpStream) -> String {
    let cc = socket2::SockRef::from(s).tcp_congestion().unwrap();
    String::from_utf8_lossy(&cc)
        .trim_end_matches('\0')
        .to_string()
}

/// `s`'s SO_RCVBUF and TCP_WINDOW_CLAMP as the kernel reports them.
#[cfg(test)]
pub(super) fn receiver_options(s: &TcpStream) -> (usize, libc::c_int) {
    let mut clamp: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a live socket; `clamp` and `len` outlive the call and `len` is its size.
    let r = unsafe {
        libc::getsockopt(
            std::os::fd::AsRawFd::as_raw_fd(s),
            libc::IPPROTO_TCP,
            libc::TCP_WINDOW_CLAMP,
            (&mut clamp as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "{}", io::Error::last_os_error());
    let rcvbuf = socket2::SockRef::from(s).recv_buffer_size().unwrap();
    (rcvbuf, clamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_bulk_sender_uses_reno_and_a_receiver_offers_at_most_its_window() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        bulk_sender(&client).unwrap();
        assert_eq!(congestion_control(&client), "reno");
        // socket(7): the kernel doubles SO_RCVBUF, so half the window was asked for and the
        // buffer is the window; the clamp is the window.
        let (server, _) = listener.accept().unwrap();
        bulk_receiver(&server, Some(100_000)).unwrap();
        assert_eq!(receiver_options(&server), (100_000, 100_000));
        // Without a window nothing changes.
        let before = receiver_options(&client);
        bulk_receiver(&client, None).unwrap();
        assert_eq!(receiver_options(&client), before);
    }
}
