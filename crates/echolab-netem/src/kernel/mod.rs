//! The kernel backend: a netem root qdisc per direction, installed, read back and removed over
//! rtnetlink (no `tc` binary needed), and a probe for `sch_netem`.
//!
//! On the link host, uplink packets (client to server) leave through the server-side device and
//! downlink packets through the client-side device, so the uplink spec goes on the server-side
//! device's egress and the downlink spec on the client-side device's.

pub(crate) mod dist;
pub(crate) mod encode;
pub mod masquerade;

use echolab_core::profile::LinkSpec;
use serde::Serialize;

use crate::nl::{self, NlError, Socket};
pub use echolab_core::link_counters::QdiscStats;
use encode::{NetemParams, TC_H_ROOT};
pub use encode::{NetemReadBack, QdiscInfo};

/// Whether this kernel can run netem, and why not (what `echolab-netem probe` prints; the
/// type lives in `echolab_core::cmd` so that the launcher reads it back with the same type).
pub use echolab_core::cmd::ProbeResult;

/// An error of the kernel backend, naming the device.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The device does not exist here, or no netlink socket could be opened.
    #[error("{0}")]
    Io(std::io::Error),
    /// The kernel refused a request.
    #[error(transparent)]
    Netlink(#[from] NlError),
    /// The kernel lists no root qdisc for the device (e.g. a device that is down).
    #[error("{0}: the kernel reports no root qdisc (is the device up?)")]
    NoRoot(String),
    /// What the kernel reports differs from what was asked.
    #[error("{dev}: read back differs from the request: {detail}")]
    Mismatch {
        /// The device.
        dev: String,
        /// Which field differs, with both values.
        detail: String,
    },
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Explains a refused netem request for humans.
fn explain(e: &NlError) -> String {
    match e.errno {
        libc::ENOENT => format!(
            "kernel {} has no sch_netem module: a netem qdisc request was refused with {}; \
             load it on the host (`modprobe sch_netem`) or use the userspace wire (`echolab-netem wire`)",
            kernel_release(),
            e.ext_ack.as_deref().map(|m| format!("{m:?} (ENOENT)")).unwrap_or_else(|| "ENOENT".into())
        ),
        libc::EPERM | libc::EACCES => format!("no permission to create qdiscs (needs CAP_NET_ADMIN): {e}"),
        _ => format!("netem qdisc request failed: {e}"),
    }
}

fn try_netem_on_lo() -> Result<(), NlError> {
    let mut sock = Socket::open().map_err(|e| NlError {
        what: "open netlink socket".into(),
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        ext_ack: None,
    })?;
    let lo = nl::ifindex("lo").map_err(|e| NlError {
        what: e.to_string(),
        errno: libc::ENODEV,
        ext_ack: None,
    })?;
    let params = NetemParams::from_spec(&LinkSpec {
        delay: echolab_core::units::Dur(std::time::Duration::from_millis(1)),
        ..LinkSpec::default()
    });
    let seq = sock.next_seq();
    sock.request(
        &encode::replace_root_netem(lo, &params, seq),
        "create netem qdisc on lo",
    )?;
    let seq = sock.next_seq();
    sock.request(&encode::delete_root(lo, seq), "delete probe qdisc on lo")
}

/// Tries to create a netem qdisc on `lo` of a fresh network namespace (a thread that
/// unshares `CLONE_NEWNET`, so nothing of the caller's network changes). Without the
/// privilege for that (a container with only NET_ADMIN), it installs and at once removes a
/// netem qdisc on `lo` of the caller's namespace, which carries no lab traffic.
pub fn probe() -> ProbeResult {
    let fresh = std::thread::spawn(|| {
        // SAFETY: unshare(2) with CLONE_NEWNET changes only this thread's network namespace;
        // the thread ends right after the probe, which drops the namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return None;
        }
        Some(try_netem_on_lo())
    })
    .join()
    .unwrap_or(None);
    let (outcome, method) = match fresh {
        Some(r) => (r, "fresh network namespace"),
        None => (try_netem_on_lo(), "lo of this namespace"),
    };
    match outcome {
        Ok(()) => ProbeResult {
            has_netem: true,
            reason: format!("kernel {} created a netem qdisc", kernel_release()),
            method: method.into(),
        },
        Err(e) => ProbeResult {
            has_netem: false,
            reason: explain(&e),
            method: method.into(),
        },
    }
}

/// What [`apply`] installed on one device, as read back.
#[derive(Debug, Clone, Serialize)]
pub struct Installed {
    /// Device name.
    pub dev: String,
    /// `"uplink"` or `"downlink"`.
    pub direction: String,
    /// The parameters sent.
    pub requested: NetemParams,
    /// The root qdisc the kernel reports afterwards.
    pub read_back: QdiscInfo,
}

/// Reads the root qdisc of `dev`.
///
/// # Errors
/// No such device; the dump was refused; no root qdisc reported.
pub fn show(dev: &str) -> Result<QdiscInfo, KernelError> {
    let idx = nl::ifindex(dev).map_err(KernelError::Io)?;
    let mut sock = Socket::open().map_err(KernelError::Io)?;
    let seq = sock.next_seq();
    let bodies = sock.dump(&encode::dump_qdiscs(seq), "dump qdiscs")?;
    bodies
        .iter()
        .filter_map(|b| encode::decode_qdisc(b))
        .find(|q| q.ifindex == idx && q.parent == TC_H_ROOT)
        .ok_or_else(|| KernelError::NoRoot(dev.into()))
}

fn check_read_back(dev: &str, want: &NetemParams, got: &QdiscInfo) -> Result<(), KernelError> {
    let mismatch = |detail: String| {
        Err(KernelError::Mismatch {
            dev: dev.into(),
            detail,
        })
    };
    let Some(nb) = &got.netem else {
        return mismatch(format!("root qdisc is {:?}, not netem", got.kind));
    };
    // Ticks are 64 ns, so the kernel may report up to one tick less than asked.
    let tick_us = encode::NS_PER_TICK as f64 / 1000.0 + 1.0;
    if (nb.delay_us - want.latency_ns as f64 / 1000.0).abs() > tick_us {
        return mismatch(format!(
            "delay {}us, asked {}us",
            nb.delay_us,
            want.latency_ns as f64 / 1000.0
        ));
    }
    if (nb.jitter_us - want.jitter_ns as f64 / 1000.0).abs() > tick_us {
        return mismatch(format!(
            "jitter {}us, asked {}us",
            nb.jitter_us,
            want.jitter_ns as f64 / 1000.0
        ));
    }
    // The kernel keeps netem's u32 loss as given; the percent is the same conversion of it.
    let want_loss = want.loss as f64 / u32::MAX as f64 * 100.0;
    if (nb.loss_percent - want_loss).abs() > 1e-9 {
        return mismatch(format!("loss {}%, asked {}%", nb.loss_percent, want_loss));
    }
    if nb.limit != want.limit {
        return mismatch(format!("limit {}, asked {}", nb.limit, want.limit));
    }
    let want_rate = (want.rate_bytes_per_s > 0).then_some(want.rate_bytes_per_s * 8);
    if nb.rate_bits_per_s != want_rate {
        return mismatch(format!(
            "rate {:?} bit/s, asked {:?}",
            nb.rate_bits_per_s, want_rate
        ));
    }
    if want_rate.is_some() && nb.packet_overhead != want.packet_overhead {
        return mismatch(format!(
            "rate overhead {} bytes, asked {}",
            nb.packet_overhead, want.packet_overhead
        ));
    }
    Ok(())
}

/// Installs `spec` as the root netem qdisc of `dev` (replacing whatever is there, so applying
/// twice is the same as once) and returns the read-back.
///
/// # Errors
/// No such device; the kernel refused (no sch_netem: see [`probe`]); the read-back differs.
pub fn apply(dev: &str, direction: &str, spec: &LinkSpec) -> Result<Installed, KernelError> {
    let idx = nl::ifindex(dev).map_err(KernelError::Io)?;
    let mut sock = Socket::open().map_err(KernelError::Io)?;
    let params = NetemParams::from_spec(spec);
    let seq = sock.next_seq();
    sock.request(
        &encode::replace_root_netem(idx, &params, seq),
        &format!("replace root qdisc of {dev} with netem"),
    )
    .map_err(|e| match e.errno {
        // Say what the missing module means, not only the kernel's terse text.
        libc::ENOENT => NlError {
            ext_ack: Some(explain(&e)),
            ..e
        },
        _ => e,
    })?;
    let read_back = show(dev)?;
    check_read_back(dev, &params, &read_back)?;
    Ok(Installed {
        dev: dev.into(),
        direction: direction.into(),
        requested: params,
        read_back,
    })
}

/// Removes the root qdisc of `dev`, restoring the kernel's default. Returns false when there
/// was nothing to remove (the default qdisc, handle 0, cannot be deleted).
///
/// # Errors
/// No such device, or any other refusal.
pub fn clear(dev: &str) -> Result<bool, KernelError> {
    let idx = nl::ifindex(dev).map_err(KernelError::Io)?;
    let mut sock = Socket::open().map_err(KernelError::Io)?;
    let seq = sock.next_seq();
    match sock.request(
        &encode::delete_root(idx, seq),
        &format!("delete root qdisc of {dev}"),
    ) {
        Ok(()) => Ok(true),
        Err(e) if e.errno == libc::ENOENT || e.errno == libc::EINVAL => Ok(false),
        Err(e) => Err(e.into()),
    }
}
