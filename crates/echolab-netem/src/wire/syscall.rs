//! The one helper the wire's raw system calls share.

use std::io;

/// `r` as a result: a negative return is errno, with the call (`what`) named in the message.
pub(super) fn cvt(r: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(r)
}
