//! Naming a network device by an address it holds.
//!
//! Inside a container the order in which Docker attaches networks decides which device is
//! `eth0` and which `eth1`, and that order is not promised. A link host knows its addresses
//! (the launcher and compose assign them), so every device argument of `echolab-netem` accepts
//! either a device name or an IPv4 address held by the device.

use std::net::Ipv4Addr;

/// The name of the interface that holds IPv4 address `ip`, from getifaddrs(3).
///
/// # Errors
/// getifaddrs failing, or no interface holding `ip` (the message names it).
pub fn device_with_address(ip: Ipv4Addr) -> Result<String, String> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| format!("getifaddrs: {e}"))?;
    for a in addrs {
        if a.address
            .and_then(|s| s.as_sockaddr_in().map(|sin| sin.ip()))
            == Some(ip)
        {
            return Ok(a.interface_name);
        }
    }
    Err(format!("no network device here holds the address {ip}"))
}

/// `arg` as a device name: an IPv4 address is replaced by the device holding it, anything
/// else is taken as a device name.
///
/// # Errors
/// As [`device_with_address`] for an address nobody holds.
pub fn resolve(arg: &str) -> Result<String, String> {
    match arg.parse::<Ipv4Addr>() {
        Ok(ip) => device_with_address(ip),
        Err(_) => Ok(arg.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_address_names_lo_and_names_pass_through() {
        assert_eq!(resolve("127.0.0.1").unwrap(), "lo");
        assert_eq!(resolve("eth7").unwrap(), "eth7");
        let e = resolve("203.0.113.77").unwrap_err();
        assert!(e.contains("203.0.113.77"), "{e}");
    }
}
