//! A minimal rtnetlink client: build messages, send them on a `NETLINK_ROUTE` socket, read
//! acknowledgements (with the kernel's extended-ack text) and dumps.
//!
//! Layouts follow linux/netlink.h and rtnetlink(7): a 16-byte `nlmsghdr`, a fixed family header
//! (`tcmsg`, `ifinfomsg`, `rtmsg`, `fib_rule_hdr`), then attributes of `{u16 len, u16 type}` plus
//! payload, each padded to 4 bytes (`NLA_ALIGN`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `NLM_F_REQUEST`: a request message.
pub(crate) const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_ACK`: ask for an acknowledgement.
pub(crate) const NLM_F_ACK: u16 = 0x4;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`): return every object.
pub(crate) const NLM_F_DUMP: u16 = 0x300;
/// `NLM_F_REPLACE`: replace an existing object.
pub(crate) const NLM_F_REPLACE: u16 = 0x100;
/// `NLM_F_EXCL`: fail if the object exists.
pub(crate) const NLM_F_EXCL: u16 = 0x200;
/// `NLM_F_CREATE`: create the object if missing.
pub(crate) const NLM_F_CREATE: u16 = 0x400;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLA_F_NESTED: u16 = 0x8000;
/// `NLA_TYPE_MASK`: the attribute type without the nested/byte-order flags.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// Rounds `n` up to netlink's 4-byte alignment (`NLMSG_ALIGN`/`NLA_ALIGN`).
pub(crate) const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// A netlink request being built: header, family struct, attributes. Lengths are patched in
/// as attributes are added, so the bytes are always a complete message.
#[derive(Debug, Clone)]
pub(crate) struct Message {
    buf: Vec<u8>,
    nests: Vec<usize>,
}

impl Message {
    /// Starts a message of `msg_type` (e.g. `RTM_NEWQDISC`) with `flags` and sequence `seq`,
    /// followed by the family header bytes `family_header` (padded to 4).
    pub(crate) fn new(msg_type: u16, flags: u16, seq: u32, family_header: &[u8]) -> Self {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&msg_type.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: 0, the kernel fills it in
        buf.extend_from_slice(family_header);
        buf.resize(align4(buf.len()), 0);
        let mut m = Self {
            buf,
            nests: Vec::new(),
        };
        m.patch_len();
        m
    }

    fn patch_len(&mut self) {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
    }

    /// Appends attribute `kind` with `payload`, padded to 4 bytes.
    pub(crate) fn attr(&mut self, kind: u16, payload: &[u8]) -> &mut Self {
        let len = (4 + payload.len()) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        self.buf.resize(align4(self.buf.len()), 0);
        self.patch_len();
        self
    }

    /// Appends a `u32` attribute in host byte order.
    pub(crate) fn attr_u32(&mut self, kind: u16, v: u32) -> &mut Self {
        self.attr(kind, &v.to_ne_bytes())
    }

    /// Appends a NUL-terminated string attribute.
    pub(crate) fn attr_str(&mut self, kind: u16, s: &str) -> &mut Self {
        let mut b = s.as_bytes().to_vec();
        b.push(0);
        self.attr(kind, &b)
    }

    /// Opens an attribute whose payload is `prefix` followed by the attributes added until
    /// [`Message::end_nest`]. With an empty prefix and `nested_flag` this is a normal nested
    /// attribute; netem's `TCA_OPTIONS` is the "compat" form, a `tc_netem_qopt` prefix then
    /// attributes, without the flag (iproute2 `addattr_nest_compat`).
    pub(crate) fn begin_nest(&mut self, kind: u16, prefix: &[u8], nested_flag: bool) -> &mut Self {
        let start = self.buf.len();
        let kind = if nested_flag {
            kind | NLA_F_NESTED
        } else {
            kind
        };
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(prefix);
        self.buf.resize(align4(self.buf.len()), 0);
        self.nests.push(start);
        self.patch_len();
        self
    }

    /// Closes the innermost attribute opened by [`Message::begin_nest`].
    ///
    /// # Panics
    /// When no nest is open: a programming error in the caller.
    pub(crate) fn end_nest(&mut self) -> &mut Self {
        let start = self.nests.pop().expect("end_nest without begin_nest");
        let len = (self.buf.len() - start) as u16;
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    /// The message bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// Iterates the attributes in `buf` as `(type, payload)`; stops at the first malformed one.
pub(crate) fn attrs(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > rest.len() {
            return None;
        }
        let payload = &rest[4..len];
        rest = &rest[align4(len).min(rest.len())..];
        Some((kind, payload))
    })
}

/// Reads a native-endian `u32` at `off`, or `None` when `b` is too short.
pub(crate) fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_ne_bytes(s.try_into().expect("4 bytes")))
}

/// Reads a native-endian `u64` at `off`, or `None` when `b` is too short.
pub(crate) fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    b.get(off..off + 8)
        .map(|s| u64::from_ne_bytes(s.try_into().expect("8 bytes")))
}

/// A request the kernel refused: its errno and, when it sent one, the extended-ack message
/// (e.g. "Specified qdisc kind is unknown.").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {} (errno {errno}){}", io::Error::from_raw_os_error(*errno), ext_ack.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
pub struct NlError {
    /// What was being done, e.g. "add netem qdisc on eth0".
    pub what: String,
    /// The positive errno.
    pub errno: i32,
    /// The kernel's explanation, from `NLMSGERR_ATTR_MSG`.
    pub ext_ack: Option<String>,
}

impl NlError {
    /// A socket error while doing `what` (not a refusal by the kernel): the I/O error's errno,
    /// EIO when it carries none.
    fn socket(what: &str, e: io::Error) -> Self {
        NlError {
            what: what.to_string(),
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            ext_ack: None,
        }
    }
}

/// How long a request waits for the kernel's answer. The kernel answers a netlink request
/// while handling it, so silence means an answer that will never come (a request that asked
/// for none): an error, not a hang.
const ANSWER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// A netlink socket in the caller's network namespace.
pub(crate) struct Socket {
    fd: OwnedFd,
    seq: u32,
}

impl Socket {
    /// Opens a `NETLINK_ROUTE` socket (see [`Socket::open_protocol`]).
    ///
    /// # Errors
    /// The socket cannot be created (no netlink in this kernel or sandbox).
    pub(crate) fn open() -> io::Result<Self> {
        Self::open_protocol(libc::NETLINK_ROUTE)
    }

    /// Opens a netlink socket of `protocol` (`NETLINK_ROUTE`, `NETLINK_NETFILTER`) and asks
    /// for extended acknowledgements (`NETLINK_EXT_ACK`), so errors carry the kernel's text.
    ///
    /// # Errors
    /// The socket cannot be created (no netlink in this kernel or sandbox).
    pub(crate) fn open_protocol(protocol: libc::c_int) -> io::Result<Self> {
        // SAFETY: plain socket(2) call; the result is checked before use.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // Failure is ignored on purpose: old kernels lack extended acks, and errors then carry
        // only the errno.
        let _ = set_option(
            &fd,
            libc::SOL_NETLINK,
            libc::NETLINK_EXT_ACK,
            &(1 as libc::c_int),
        );
        let timeout = libc::timeval {
            tv_sec: ANSWER_DEADLINE.as_secs() as libc::time_t,
            tv_usec: 0,
        };
        set_option(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout)?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(1);
        Ok(Self { fd, seq: seed })
    }

    /// The next sequence number for a message.
    pub(crate) fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends `msg` and returns its sequence number (`nlmsg_seq`, bytes 8..12 of the header),
    /// by which its replies are recognised.
    fn send(&self, msg: &Message) -> io::Result<u32> {
        self.send_bytes(msg.bytes())?;
        Ok(u32_at(msg.bytes(), 8).unwrap_or(0))
    }

    fn send_bytes(&self, b: &[u8]) -> io::Result<()> {
        // SAFETY: `b` is a live slice; a zeroed sockaddr_nl addresses the kernel (pid 0).
        let n = unsafe {
            let mut addr: libc::sockaddr_nl = std::mem::zeroed();
            addr.nl_family = libc::AF_NETLINK as u16;
            libc::sendto(
                self.fd.as_raw_fd(),
                b.as_ptr().cast(),
                b.len(),
                0,
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn recv(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        buf.resize(1 << 16, 0);
        loop {
            // SAFETY: `buf` is a live, writable buffer of the length passed.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                // SO_RCVTIMEO ran out: ANSWER_DEADLINE.
                return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
            }
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Sends `msg` (which must carry `NLM_F_ACK` and sequence number `seq`) and waits for its
    /// acknowledgement.
    ///
    /// # Errors
    /// The kernel's refusal as an [`NlError`] labelled `what`; socket errors as errno 0 with
    /// the I/O error text.
    pub(crate) fn request(&self, msg: &Message, what: &str) -> Result<(), NlError> {
        let io_err = |e| NlError::socket(what, e);
        let seq = self.send(msg).map_err(io_err)?;
        let mut buf = Vec::new();
        loop {
            let n = self.recv(&mut buf).map_err(io_err)?;
            for (kind, flags, mseq, body) in messages(&buf[..n]) {
                if mseq != seq || kind != NLMSG_ERROR {
                    continue;
                }
                return match parse_error(flags, body) {
                    (0, _) => Ok(()),
                    (errno, ext_ack) => Err(NlError {
                        what: what.to_string(),
                        errno,
                        ext_ack,
                    }),
                };
            }
        }
    }

    /// Sends `msgs` in one datagram (an nfnetlink batch: `NFNL_MSG_BATCH_BEGIN`, the
    /// requests, `NFNL_MSG_BATCH_END`, which the kernel applies all or nothing) and waits
    /// until every message that carries `NLM_F_ACK` is acknowledged.
    ///
    /// # Errors
    /// The first refusal the kernel reports for any message of the batch, as an [`NlError`]
    /// labelled `what` (a sender without CAP_NET_ADMIN gets EPERM for the batch's first
    /// message, which asked for no acknowledgement); socket errors as in [`Socket::request`].
    pub(crate) fn request_batch(&self, msgs: &[Message], what: &str) -> Result<(), NlError> {
        let io_err = |e| NlError::socket(what, e);
        let seq_of = |m: &Message| u32_at(&m.buf, 8).unwrap_or(0);
        let batch: Vec<u32> = msgs.iter().map(seq_of).collect();
        let mut waiting: Vec<u32> = msgs
            .iter()
            .filter(|m| u16::from_ne_bytes([m.buf[6], m.buf[7]]) & NLM_F_ACK != 0)
            .map(seq_of)
            .collect();
        let datagram: Vec<u8> = msgs
            .iter()
            .flat_map(|m| m.bytes().iter().copied())
            .collect();
        self.send_bytes(&datagram).map_err(io_err)?;
        let mut buf = Vec::new();
        while !waiting.is_empty() {
            let n = self.recv(&mut buf).map_err(io_err)?;
            for (kind, flags, mseq, body) in messages(&buf[..n]) {
                if kind != NLMSG_ERROR || !batch.contains(&mseq) {
                    continue;
                }
                match parse_error(flags, body) {
                    (0, _) => waiting.retain(|s| *s != mseq),
                    (errno, ext_ack) => {
                        return Err(NlError {
                            what: what.to_string(),
                            errno,
                            ext_ack,
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Sends a dump request and returns each reply message's body (after the `nlmsghdr`).
    ///
    /// # Errors
    /// As [`Socket::request`].
    pub(crate) fn dump(&self, msg: &Message, what: &str) -> Result<Vec<Vec<u8>>, NlError> {
        let io_err = |e| NlError::socket(what, e);
        let seq = self.send(msg).map_err(io_err)?;
        let mut out = Vec::new();
        let mut buf = Vec::new();
        loop {
            let n = self.recv(&mut buf).map_err(io_err)?;
            for (kind, flags, mseq, body) in messages(&buf[..n]) {
                if mseq != seq {
                    continue;
                }
                match kind {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let (errno, ext_ack) = parse_error(flags, body);
                        if errno == 0 {
                            return Ok(out);
                        }
                        return Err(NlError {
                            what: what.to_string(),
                            errno,
                            ext_ack,
                        });
                    }
                    _ => out.push(body.to_vec()),
                }
            }
        }
    }
}

/// setsockopt(2) on `fd` (any socket: a netlink one, a packet socket, a TCP stream) with the
/// option value `value` (a plain C struct or integer).
pub(crate) fn set_option<T>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: the option value points at a live `T` of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Splits a receive buffer into `(type, flags, seq, body)` messages.
fn messages(buf: &[u8]) -> impl Iterator<Item = (u16, u16, u32, &[u8])> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let len = u32_at(rest, 0)? as usize;
        if len < 16 || len > rest.len() {
            return None;
        }
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        let flags = u16::from_ne_bytes([rest[6], rest[7]]);
        let seq = u32_at(rest, 8)?;
        let body = &rest[16..len];
        rest = &rest[align4(len).min(rest.len())..];
        Some((kind, flags, seq, body))
    })
}

/// Reads an `nlmsgerr` body: the positive errno (0 for an ack) and the extended-ack text.
fn parse_error(flags: u16, body: &[u8]) -> (i32, Option<String>) {
    let errno = body
        .get(0..4)
        .map(|b| -i32::from_ne_bytes(b.try_into().expect("4 bytes")))
        .unwrap_or(libc::EIO);
    if flags & NLM_F_ACK_TLVS == 0 {
        return (errno, None);
    }
    // After the errno comes the offending request's header, and its payload unless capped.
    let orig_len = u32_at(body, 4).unwrap_or(16) as usize;
    let skip = 4 + if flags & NLM_F_CAPPED != 0 {
        16
    } else {
        align4(orig_len)
    };
    let tlvs = body.get(skip..).unwrap_or_default();
    let msg = attrs(tlvs)
        .find(|(k, _)| *k == NLMSGERR_ATTR_MSG)
        .map(|(_, v)| {
            String::from_utf8_lossy(v)
                .trim_end_matches('\0')
                .to_string()
        });
    (errno, msg)
}

/// The index of interface `name` in the caller's network namespace.
///
/// # Errors
/// `NotFound` naming the interface when it does not exist.
pub(crate) fn ifindex(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?} contains NUL"),
        )
    })?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface named {name:?} in this network namespace"),
        ));
    }
    Ok(idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_lengths_are_patched() {
        let mut m = Message::new(36, NLM_F_REQUEST, 7, &[0u8; 20]);
        m.attr_str(1, "netem");
        m.begin_nest(2, &[1, 2, 3, 4, 5, 6], false);
        m.attr_u32(6, 0xdead_beef);
        m.end_nest();
        let b = m.bytes();
        assert_eq!(u32_at(b, 0).unwrap() as usize, b.len());
        let body = &b[16 + 20..];
        let got: Vec<(u16, usize)> = attrs(body).map(|(k, v)| (k, v.len())).collect();
        // "netem\0" is 6 bytes; the nest holds 6 prefix bytes + 2 padding + one 8-byte attribute.
        assert_eq!(got, vec![(1, 6), (2, 16)]);
    }

    #[test]
    fn error_body_yields_errno_and_ext_ack_text() {
        // nlmsgerr: error -2, then a capped original header, then NLMSGERR_ATTR_MSG.
        let mut body = (-2i32).to_ne_bytes().to_vec();
        body.extend_from_slice(&[16, 0, 0, 0, 36, 0, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0]);
        let text = b"Specified qdisc kind is unknown.\0";
        body.extend_from_slice(&((4 + text.len()) as u16).to_ne_bytes());
        body.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        body.extend_from_slice(text);
        let (errno, msg) = parse_error(NLM_F_ACK_TLVS | NLM_F_CAPPED, &body);
        assert_eq!(errno, libc::ENOENT);
        assert_eq!(msg.as_deref(), Some("Specified qdisc kind is unknown."));
        assert_eq!(parse_error(0, &0i32.to_ne_bytes()), (0, None));
    }
}
