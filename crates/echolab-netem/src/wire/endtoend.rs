//! The delay the wire adds, seen from outside: UDP round trips between the [`Testbed`]'s
//! client and server, with the wire and without it, compared with what the wire's own link
//! model ([`Shaper`]) says each of those packets should get. Used by `examples/wire_perf.rs`
//! and the live tests.
//!
//! The model is drawn with the wire's seed, so its i-th draw is the delay the wire gave the
//! i-th exchange's packets (each direction's shaper draws once per packet it admits, in
//! arrival order, and the exchanges are sequential). The error of exchange i is therefore
//! (its RTT through the wire − the median RTT without it) − the model's i-th added RTT, and
//! the p50/p99 errors are quantiles of those per-exchange errors. Comparing quantiles of the
//! two sets instead (the q-quantile of the RTTs minus the model's q-quantile) mixes in the
//! error's skew: with 1 ms jitters, a few exchanges held 300 µs too long each move across
//! the median, which shifted it by 60–140 µs where the per-exchange median error was −2 to
//! +40 µs (crossnet, 300 exchanges, 3 seeds, measured on the 2-core Intel VM); that figure
//! is kept as [`AddedDelayError::median_shift`]. For a profile without jitter every draw is
//! one number (2 × (delay + serialization)) and the two ways agree.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrIn};
use nix::sys::time::TimeSpec;

use echolab_core::profile::LinkSpec;

use super::shaper::{Shaper, Verdict};
use crate::testbed::{Testbed, CLIENT_ADDR, SERVER_ADDR};

/// IPv4 + UDP headers + the 8-byte sequence number each round trip carries, bytes.
pub const PROBE_IP_BYTES: usize = 20 + 8 + 8;

/// Real-time priority of the measuring threads: below the wire's (50), so the wire is never
/// delayed by its own measurement.
const MEASURER_PRIORITY: i32 = 40;

/// Puts the calling thread in SCHED_FIFO at [`MEASURER_PRIORITY`]; false when not permitted.
/// A fair-scheduled client that sleeps through a 200 µs round trip waits for its CPU behind
/// other work when the answer comes (measured on the 2-core host: RTT p99 in milliseconds
/// through the wire while the 14 µs unimpaired round trips, too short to sleep through, stayed
/// tight), which would be charged to the wire.
fn measurer_priority() -> bool {
    let param = libc::sched_param {
        sched_priority: MEASURER_PRIORITY,
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Sorted round-trip times, µs, of `n` sequential 8-byte UDP exchanges from the testbed's
/// client to an echo socket in its server namespace, both threads at real-time priority when
/// permitted. After each exchange the client pauses `pace`: a baseline without the wire is
/// paced by the added RTT expected with it, so both threads sleep as long between packets as
/// they do through the wire and the wake-up from that sleep (longer from a deeper idle state)
/// is in the baseline too, not charged to the wire. An exchange with no answer within 1 s is
/// left out (the result is shorter than `n`); the whole run also stops after `limit`.
///
/// # Errors
/// A namespace cannot be entered or a socket cannot be created.
pub fn udp_round_trips(
    tb: &Testbed,
    n: usize,
    pace: Duration,
    limit: Duration,
) -> io::Result<Vec<f64>> {
    Ok(sorted(&round_trips(tb, n, pace, limit, ClientWait::Block)?))
}

/// The answered round trips of `in_order` (as [`round_trips`] gives them), sorted.
pub fn sorted(in_order: &[Option<f64>]) -> Vec<f64> {
    let mut rtts: Vec<f64> = in_order.iter().flatten().copied().collect();
    rtts.sort_by(f64::total_cmp);
    rtts
}

/// The names of [`round_trips`]' echo and client threads (as `top -H` and /proc show them).
pub const ECHO_THREAD: &str = "rtt-echo";
/// See [`ECHO_THREAD`].
pub const CLIENT_THREAD: &str = "rtt-client";

/// How each round trip is waited for and timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientWait {
    /// Blocked in `recv` at real-time priority, as an application waits: a wait as long as
    /// the link's delay may end in a deeper idle state and a slower wake-up than the short
    /// wait without the link, and that difference is charged to the link.
    Block,
    /// Polling `recv` without blocking, fair-scheduled (a real-time spinner would be throttled
    /// by `sched_rt_runtime_us` and stall the CPU it shares): the client never sleeps during an
    /// exchange, with or without the link, so its own wake-up is in neither figure and the
    /// difference is what the link adds.
    Spin,
    /// Both endpoints blocked as in [`ClientWait::Block`], but each RTT is taken from the
    /// kernel's receive stamps (SO_TIMESTAMPNS, socket(7)) less the echo's turnaround, the
    /// two-way method of RFC 5357 (TWAMP, §4.2.1): (T4 − T1) − (T3 − T2), T1 the client's
    /// clock just before it sends, T2 the kernel's stamp of the request's arrival at the echo
    /// socket, T3 the echo's clock just before it answers, T4 the stamp of the answer's
    /// arrival at the client's socket. No endpoint's wake-up or wait for a CPU is in it, only
    /// the way between the sockets: the figure a link is judged by. Polling endpoints leave
    /// their wake-up out but not the CPU another thread takes from them: on the 2-core VMs
    /// (`perf trace -e sched:sched_switch` during `wire_perf --section delay`) DAMON's kernel thread `kdamond`, which runs every
    /// 512 ms for 0.4 to 1.7 ms, held an idle-priority echo poller up to 2.1 ms with the
    /// answer waiting in its socket, the whole of that measurement's millisecond tail.
    Stamped,
}

impl ClientWait {
    /// Whether the client polls.
    fn client_polls(self) -> bool {
        self == Self::Spin
    }

    /// Whether RTTs come from the kernel's receive stamps less the echo's turnaround.
    fn stamped(self) -> bool {
        self == Self::Stamped
    }
}

/// The calling endpoint thread's scheduling: blocked, real-time below the wire
/// ([`measurer_priority`]); polling, fair (a real-time poller would be throttled and stall
/// its CPU).
fn endpoint_priority(polls: bool) {
    if !polls {
        measurer_priority();
    }
}

/// [`udp_round_trips`] with the client waiting as `wait` says, in exchange order: element i
/// is exchange i's RTT, µs, `None` when it had no answer within 1 s; shorter than `n` when
/// `limit` ended the run.
///
/// # Errors
/// As [`udp_round_trips`].
pub fn round_trips(
    tb: &Testbed,
    n: usize,
    pace: Duration,
    limit: Duration,
    wait: ClientWait,
) -> io::Result<Vec<Option<f64>>> {
    let echo = tb.in_netns(&tb.srv, || UdpSocket::bind((SERVER_ADDR, 0)))??;
    let port = echo.local_addr()?.port();
    echo.set_read_timeout(Some(Duration::from_secs(1)))?;
    let client = tb.in_netns(&tb.cli, || UdpSocket::bind((CLIENT_ADDR, 0)))??;
    client.set_read_timeout(Some(Duration::from_secs(1)))?;
    client.set_nonblocking(wait.client_polls())?;
    for socket in [&echo, &client] {
        setsockopt(socket, sockopt::ReceiveTimestampns, &wait.stamped())
            .map_err(io::Error::from)?;
    }
    if wait.stamped() {
        await_arrival_stamps(&echo)?;
    }
    let echo_thread = std::thread::Builder::new().name(ECHO_THREAD.into()).spawn(
        move || -> HashMap<u64, i64> {
            endpoint_priority(false);
            echo_until_silent(&echo)
        },
    )?;
    let client_thread = std::thread::Builder::new()
        .name(CLIENT_THREAD.into())
        .spawn(move || -> io::Result<Vec<Option<Exchange>>> {
            endpoint_priority(wait.client_polls());
            let end = Instant::now() + limit;
            let mut exchanges = Vec::with_capacity(n);
            let mut buf = [0u8; 64];
            for i in 0..n as u64 {
                if Instant::now() >= end {
                    break;
                }
                let t0 = Instant::now();
                let t1 = realtime_ns();
                client.send_to(&i.to_le_bytes(), (SERVER_ADDR, port))?;
                // A late answer to an earlier exchange is skipped, not timed as this one.
                let give_up = t0 + Duration::from_secs(1);
                let exchange = loop {
                    match recv_stamped(&client, &mut buf) {
                        Ok((len, _, t4)) if len == 8 && buf[..8] == i.to_le_bytes() => {
                            break Some(Exchange {
                                rtt_us: t0.elapsed().as_secs_f64() * 1e6,
                                stamped_ns: t4.map(|t4| t4 - t1),
                            });
                        }
                        Ok(_) => {}
                        Err(e)
                            if e.kind() == io::ErrorKind::WouldBlock
                                && Instant::now() < give_up =>
                        {
                            std::hint::spin_loop()
                        }
                        Err(_) => break None,
                    }
                };
                exchanges.push(exchange);
                if !pace.is_zero() {
                    // Pacing is the measurement's traffic pattern, not a wait for a condition.
                    std::thread::sleep(pace);
                }
            }
            Ok(exchanges)
        })?;
    let exchanges = client_thread
        .join()
        .map_err(|_| io::Error::other("round-trip client panicked"))??;
    let turnarounds = echo_thread
        .join()
        .map_err(|_| io::Error::other("round-trip echo panicked"))?;
    if wait.stamped() {
        two_way_rtts(exchanges, &turnarounds)
    } else {
        Ok(exchanges.into_iter().map(|e| e.map(|e| e.rtt_us)).collect())
    }
}

/// How long a probe of [`await_arrival_stamps`] waits in its socket before it is read.
const STAMP_PROBE_HOLD: Duration = Duration::from_millis(1);

/// Returns once the kernel stamps datagrams when they arrive, not when they are read, on
/// `socket` (SO_TIMESTAMPNS on, blocking with a read timeout). The first socket on a machine
/// to ask for stamps turns arrival stamping on through a deferred work item
/// (`net_enable_timestamp()`, net/core/dev.c); a datagram that arrives before it has run is
/// stamped when it is read (`__sock_recv_timestamp()`, net/socket.c), which would make a
/// request's wait in the echo's socket count as none. Each probe is a datagram to `socket`
/// itself (not 8 bytes long, so never taken for an exchange), read [`STAMP_PROBE_HOLD`] later.
///
/// # Errors
/// The probe cannot be sent or read, or no probe was stamped on arrival within 1 s.
fn await_arrival_stamps(socket: &UdpSocket) -> io::Result<()> {
    let me = socket.local_addr()?;
    let give_up = Instant::now() + Duration::from_secs(1);
    let mut buf = [0u8; 16];
    loop {
        socket.send_to(b"stamp probe", me)?;
        // The probe's hold is what is measured, not a wait for a condition.
        std::thread::sleep(STAMP_PROBE_HOLD);
        let (_, _, stamp) = recv_stamped(socket, &mut buf)?;
        let held = stamp.map(|t| realtime_ns() - t);
        if held.is_some_and(|h| h >= STAMP_PROBE_HOLD.as_nanos() as i64) {
            return Ok(());
        }
        if Instant::now() >= give_up {
            return Err(io::Error::other(format!(
                "the kernel did not stamp datagrams on arrival within 1 s (SO_TIMESTAMPNS; \
                 the last probe, held {STAMP_PROBE_HOLD:?}, read {held:?} ns after its stamp)"
            )));
        }
    }
}

/// Answers each datagram on `echo` with its own bytes until a read fails (the socket's read
/// timeout: the client has gone quiet). Returns, per 8-byte request that carried a receive
/// stamp, its exchange number → the echo's turnaround T3 − T2, ns: from the kernel's stamp of
/// its arrival (T2) to the clock just before the answer (T3), so time the request spent
/// waiting in the socket for the echo to wake counts in it (and, subtracted, not in the RTT).
fn echo_until_silent(echo: &UdpSocket) -> HashMap<u64, i64> {
    let mut buf = [0u8; 64];
    let mut turnarounds = HashMap::new();
    while let Ok((len, from, stamp)) = recv_stamped(echo, &mut buf) {
        if let (Some(t2), Ok(seq)) = (stamp, <[u8; 8]>::try_from(&buf[..len])) {
            turnarounds.insert(u64::from_le_bytes(seq), realtime_ns() - t2);
        }
        let _ = echo.send_to(&buf[..len], from);
    }
    turnarounds
}

/// RFC 5357's two-way RTT of each answered exchange (element i is exchange i), µs:
/// (T4 − T1) − (T3 − T2), with the echo's turnaround T3 − T2 looked up by exchange number in
/// `turnarounds` (ns).
///
/// # Errors
/// An answered exchange without a receive stamp at the client or at the echo.
fn two_way_rtts(
    exchanges: Vec<Option<Exchange>>,
    turnarounds: &HashMap<u64, i64>,
) -> io::Result<Vec<Option<f64>>> {
    exchanges
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let Some(e) = e else { return Ok(None) };
            let missing = |at: &str| {
                io::Error::other(format!(
                    "exchange {i}: the kernel gave no receive stamp (SO_TIMESTAMPNS) at {at}"
                ))
            };
            let t4_t1 = e.stamped_ns.ok_or_else(|| missing("the client"))?;
            let t3_t2 = turnarounds
                .get(&(i as u64))
                .ok_or_else(|| missing("the echo"))?;
            Ok(Some((t4_t1 - t3_t2) as f64 / 1e3))
        })
        .collect()
}

/// One answered exchange as the client saw it.
struct Exchange {
    /// Its own clock from before the send to the answer's read, µs.
    rtt_us: f64,
    /// The answer's kernel receive stamp less the client's clock before the send (T4 − T1),
    /// ns; `None` without receive stamps.
    stamped_ns: Option<i64>,
}

/// CLOCK_REALTIME, ns: the clock of SO_TIMESTAMPNS stamps (socket(7)).
fn realtime_ns() -> i64 {
    super::clock::read_ns(libc::CLOCK_REALTIME)
}

/// One datagram from `socket` (blocking or not, as the socket is): its length, its sender, and
/// the kernel's receive stamp, ns of CLOCK_REALTIME, where SO_TIMESTAMPNS is on. A timeout or
/// an empty non-blocking socket is an error of kind `WouldBlock`.
fn recv_stamped(
    socket: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<i64>)> {
    let mut iov = [io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(TimeSpec);
    let msg = recvmsg::<SockaddrIn>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::empty(),
    )
    .map_err(io::Error::from)?;
    let stamp = msg.cmsgs().map_err(io::Error::from)?.find_map(|c| match c {
        ControlMessageOwned::ScmTimestampns(t) => Some(t.tv_sec() * 1_000_000_000 + t.tv_nsec()),
        _ => None,
    });
    let from = msg
        .address
        .map(|a| SocketAddr::V4(a.into()))
        .ok_or_else(|| io::Error::other("a datagram without a sender address"))?;
    Ok((msg.bytes, from, stamp))
}

/// The q-quantile (0..=1) of sorted `values`, nearest rank; NaN when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Sorted added RTTs, µs, that the link model gives `samples` isolated packets of `ip_bytes`
/// (uplink then downlink, far enough apart that none waits for another), drawn with `seed`.
pub fn model_added_rtt(
    uplink: &LinkSpec,
    downlink: &LinkSpec,
    ip_bytes: usize,
    samples: usize,
    seed: u64,
) -> Vec<f64> {
    let mut added = model_added_rtt_in_order(uplink, downlink, ip_bytes, samples, seed);
    added.sort_by(f64::total_cmp);
    added
}

/// [`model_added_rtt`] in the order the packets were drawn: the i-th is the i-th round trip's.
pub fn model_added_rtt_in_order(
    uplink: &LinkSpec,
    downlink: &LinkSpec,
    ip_bytes: usize,
    samples: usize,
    seed: u64,
) -> Vec<f64> {
    let mut up = Shaper::new(uplink, seed);
    let mut down = Shaper::new(downlink, seed.wrapping_add(1));
    // Far beyond any delay, jitter or serialization, so packets stay isolated.
    const SPACING_NS: u64 = 10_000_000_000;
    let one_way = |s: &mut Shaper, at: u64| match s.admit(at, ip_bytes, 0) {
        Verdict::Release(t) => t - at,
        // The model's loss says nothing about delay; count it as the spec's plain delay.
        _ => s.nominal_delay(ip_bytes).as_nanos() as u64,
    };
    (0..samples as u64)
        .map(|i| {
            let at = (i + 1) * SPACING_NS;
            (one_way(&mut up, at) + one_way(&mut down, at)) as f64 / 1000.0
        })
        .collect()
}

/// Added-delay error of one measurement, µs (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AddedDelayError {
    /// Median of the per-exchange errors.
    pub p50: f64,
    /// 99th percentile of the per-exchange errors: holds the host's own noise (the
    /// baseline's p99 − p50) besides the wire's.
    pub p99: f64,
    /// The 99th percentile of the RTTs through the wire less each exchange's model draw,
    /// minus the baseline's 99th percentile: the path's own tail is in both and cancels, the
    /// wire's own tail is left.
    pub p99_beyond_noise: f64,
    /// The largest per-exchange error.
    pub max: f64,
    /// The median added RTT of the whole set minus the model's median: how far the delay
    /// distribution the link gave is from the profile's at its middle, whatever the pairing.
    pub median_shift: f64,
    /// Exchanges compared (those answered).
    pub exchanges: usize,
}

impl AddedDelayError {
    /// Compares RTTs through the wire in exchange order (`shaped`, as [`round_trips`] gives
    /// them) with sorted RTTs without it (`baseline`) and the model's added RTTs in draw order
    /// (`model`, [`model_added_rtt_in_order`]), all µs. Exchange i is paired with draw i; an
    /// exchange past the model's end is left out. NaN fields when nothing is compared.
    pub fn of(shaped: &[Option<f64>], baseline: &[f64], model: &[f64]) -> Self {
        let baseline_p50 = quantile(baseline, 0.5);
        let pairs: Vec<(f64, f64)> = shaped
            .iter()
            .zip(model)
            .filter_map(|(rtt, m)| rtt.map(|r| (r, *m)))
            .collect();
        let mut errors: Vec<f64> = pairs.iter().map(|(r, m)| r - baseline_p50 - m).collect();
        errors.sort_by(f64::total_cmp);
        let mut without_model: Vec<f64> = pairs.iter().map(|(r, m)| r - m).collect();
        without_model.sort_by(f64::total_cmp);
        let mut rtts: Vec<f64> = pairs.iter().map(|(r, _)| *r).collect();
        rtts.sort_by(f64::total_cmp);
        let mut draws: Vec<f64> = pairs.iter().map(|(_, m)| *m).collect();
        draws.sort_by(f64::total_cmp);
        Self {
            p50: quantile(&errors, 0.5),
            p99: quantile(&errors, 0.99),
            p99_beyond_noise: quantile(&without_model, 0.99) - quantile(baseline, 0.99),
            max: quantile(&errors, 1.0),
            median_shift: quantile(&rtts, 0.5) - baseline_p50 - quantile(&draws, 0.5),
            exchanges: pairs.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use echolab_core::profile::JitterDistribution;
    use echolab_core::units::{BitRate, Dur};

    #[test]
    fn model_without_jitter_is_twice_delay_plus_serialization() {
        let spec = LinkSpec {
            delay: Dur(Duration::from_micros(100)),
            rate: Some(BitRate(100_000_000)),
            overhead: 38,
            ..LinkSpec::default()
        };
        let m = model_added_rtt(&spec, &spec, PROBE_IP_BYTES, 100, 1);
        // (36 + 38) bytes at 100 Mbit/s = 5.92 us each way.
        assert!(
            (m[0] - 211.84).abs() < 0.01 && (m[99] - 211.84).abs() < 0.01,
            "{m:?}"
        );
        let shaped = [Some(300.0), Some(320.0), Some(330.0)];
        let e = AddedDelayError::of(&shaped, &[80.0, 90.0, 95.0], &m);
        assert!((e.p50 - (320.0 - 90.0 - 211.84)).abs() < 0.01, "{e:?}");
        assert!((e.max - (330.0 - 90.0 - 211.84)).abs() < 0.01, "{e:?}");
    }

    #[test]
    fn the_tail_beyond_noise_leaves_out_the_paths_own_tail() {
        // A path of 100 µs with a 1-in-50 tail of 160 µs, and a wire adding exactly 200 µs:
        // measured against the baseline's median the p99 shows the path's 60 µs tail, against
        // the baseline plus the model nothing.
        let baseline: Vec<f64> = (0..1000)
            .map(|i| if i % 50 == 0 { 160.0 } else { 100.0 })
            .collect();
        let mut sorted = baseline.clone();
        sorted.sort_by(f64::total_cmp);
        let shaped: Vec<Option<f64>> = sorted.iter().map(|b| Some(b + 200.0)).collect();
        let model = vec![200.0; 1000];
        let e = AddedDelayError::of(&shaped, &sorted, &model);
        assert_eq!((e.p50, e.p99, e.max), (0.0, 60.0, 60.0), "{e:?}");
        assert_eq!(e.p99_beyond_noise, 0.0, "{e:?}");
        // A wire whose slowest 2% come 30 µs late: its own tail, seen as such.
        let late: Vec<Option<f64>> = shaped
            .iter()
            .enumerate()
            .map(|(i, v)| v.map(|v| if i >= 980 { v + 30.0 } else { v }))
            .collect();
        let e = AddedDelayError::of(&late, &sorted, &model);
        assert_eq!(e.p99_beyond_noise, 30.0, "{e:?}");
        assert!(AddedDelayError::of(&[], &sorted, &model).p99.is_nan());
    }

    /// Model draws 1000..2000 µs in a scrambled order (7919 is prime to 1000), a constant
    /// 50 µs path, and a wire exact but for every tenth exchange, held 500 µs too long.
    fn jittered_with_late_tenth() -> (Vec<Option<f64>>, Vec<f64>, Vec<f64>) {
        let model: Vec<f64> = (0..1000)
            .map(|i| 1000.0 + (i * 7919 % 1000) as f64)
            .collect();
        let shaped = model
            .iter()
            .enumerate()
            .map(|(i, m)| Some(50.0 + m + if i % 10 == 0 { 500.0 } else { 0.0 }))
            .collect();
        (shaped, vec![50.0; 100], model)
    }

    #[test]
    fn errors_are_per_exchange_and_the_median_shift_holds_their_skew() {
        let (shaped, baseline, model) = jittered_with_late_tenth();
        let e = AddedDelayError::of(&shaped, &baseline, &model);
        assert_eq!((e.p50, e.p99, e.max), (0.0, 500.0, 500.0), "{e:?}");
        assert_eq!(e.exchanges, 1000);
        // A tenth moved up 500 µs in a 1000 µs-wide uniform: 5% of the set crosses the
        // median, which moves up by 5% of the width.
        assert!((e.median_shift - 50.0).abs() <= 2.0, "{e:?}");
    }

    #[test]
    fn an_unanswered_exchange_keeps_the_later_ones_paired() {
        let (mut shaped, baseline, model) = jittered_with_late_tenth();
        shaped[0] = None;
        shaped.truncate(10);
        let e = AddedDelayError::of(&shaped, &baseline, &model);
        // Exchanges 1..=9 are all exact; shifted one place they would be off by hundreds.
        assert_eq!((e.p50, e.max, e.exchanges), (0.0, 0.0, 9), "{e:?}");
        assert!(AddedDelayError::of(&[None], &baseline, &model).p50.is_nan());
    }

    #[test]
    fn sorted_leaves_out_the_unanswered_and_orders_the_rest() {
        assert_eq!(
            sorted(&[Some(30.0), None, Some(10.0), Some(20.0), None]),
            vec![10.0, 20.0, 30.0]
        );
        assert!(sorted(&[None]).is_empty());
    }

    #[test]
    fn model_in_order_is_the_sorted_models_draws() {
        let spec = LinkSpec {
            delay: Dur(Duration::from_millis(10)),
            jitter: Dur(Duration::from_millis(1)),
            distribution: JitterDistribution::Normal,
            ..LinkSpec::default()
        };
        let mut in_order = model_added_rtt_in_order(&spec, &spec, PROBE_IP_BYTES, 50, 7);
        assert_ne!(
            in_order,
            model_added_rtt(&spec, &spec, PROBE_IP_BYTES, 50, 7)
        );
        in_order.sort_by(f64::total_cmp);
        assert_eq!(
            in_order,
            model_added_rtt(&spec, &spec, PROBE_IP_BYTES, 50, 7)
        );
    }

    #[test]
    fn model_with_normal_jitter_spreads_by_sigma_root_two() {
        let spec = LinkSpec {
            delay: Dur(Duration::from_millis(10)),
            jitter: Dur(Duration::from_millis(1)),
            distribution: JitterDistribution::Normal,
            ..LinkSpec::default()
        };
        let m = model_added_rtt(&spec, &spec, PROBE_IP_BYTES, 20_000, 3);
        // Sum of two N(10 ms, 1 ms): median 20 ms, 99th percentile 20 + 2.326 x 1.414 ms.
        assert!(
            (quantile(&m, 0.5) - 20_000.0).abs() < 60.0,
            "{}",
            quantile(&m, 0.5)
        );
        assert!(
            (quantile(&m, 0.99) - 23_290.0).abs() < 150.0,
            "{}",
            quantile(&m, 0.99)
        );
    }

    #[test]
    fn two_way_rtt_is_the_client_span_less_the_echo_turnaround() {
        let answered = |t4_t1_ns| {
            Some(Exchange {
                rtt_us: 1000.0,
                stamped_ns: Some(t4_t1_ns),
            })
        };
        // Exchange 0: 250 µs from send to the answer's arrival, 40 µs held by the echo;
        // exchange 1 unanswered; exchange 2: 100 µs, 100 ns held.
        let turnarounds = HashMap::from([(0, 40_000), (2, 100)]);
        let rtts = two_way_rtts(
            vec![answered(250_000), None, answered(100_000)],
            &turnarounds,
        );
        assert_eq!(rtts.unwrap(), vec![Some(210.0), None, Some(99.9)]);
        // A missing stamp is an error that says where, not a figure.
        let no_client_stamp = Some(Exchange {
            rtt_us: 1000.0,
            stamped_ns: None,
        });
        let e = two_way_rtts(vec![no_client_stamp], &turnarounds).unwrap_err();
        assert!(
            e.to_string().contains("exchange 0") && e.to_string().contains("the client"),
            "{e}"
        );
        let e = two_way_rtts(vec![None, answered(5)], &turnarounds).unwrap_err();
        assert!(
            e.to_string().contains("exchange 1") && e.to_string().contains("the echo"),
            "{e}"
        );
    }

    #[test]
    fn the_echo_turnaround_counts_from_the_requests_arrival_not_its_read() {
        let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
        echo.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        setsockopt(&echo, sockopt::ReceiveTimestampns, &true).unwrap();
        await_arrival_stamps(&echo).unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        client
            .send_to(&7u64.to_le_bytes(), echo.local_addr().unwrap())
            .unwrap();
        // The hold under test: the request waits 50 ms in the echo's socket before it is read,
        // as it does while an echo wakes; the turnaround must hold those 50 ms.
        std::thread::sleep(Duration::from_millis(50));
        let turnarounds = echo_until_silent(&echo);
        assert_eq!(turnarounds.len(), 1, "{turnarounds:?}");
        let held = turnarounds[&7];
        assert!((50_000_000..1_000_000_000).contains(&held), "{held} ns");
        let mut buf = [0u8; 16];
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &7u64.to_le_bytes(), "the answer is the request");
    }
}
