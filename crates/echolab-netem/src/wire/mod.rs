//! The userspace wire: link impairment without sch_netem, as a process on the link host.
//!
//! [`plumbing`] routes what arrives on each side into a TUN device per direction, [`pump`]
//! carries each direction through its [`shaper::Shaper`] from each packet's kernel arrival
//! stamp ([`arrival`]), or, without CAP_NET_RAW, from its read time minus the wire's own
//! per-pass overhead that [`probe`] measures (all on the one `clock`), and [`Wire`] ties them
//! together, reports [`counters::WireStats`] and removes its rules when it stops.

pub(crate) mod arrival;
mod clock;
pub mod counters;
#[cfg(feature = "testbed")]
pub mod endtoend;
pub(crate) mod nat;
pub(crate) mod plumbing;
pub(crate) mod probe;
pub(crate) mod pump;
pub(crate) mod rng;
pub(crate) mod shaper;
mod syscall;

use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use echolab_core::profile::LinkSpec;

use crate::nl::Socket;
use counters::{DirectionTally, WireStats};
use plumbing::Rule;
use pump::{Pump, StopSignal};

/// Where the wire sits and what it applies.
#[derive(Debug, Clone)]
pub struct WireConfig {
    /// Profile name, for the stats.
    pub profile: String,
    /// Client-to-server spec.
    pub uplink: LinkSpec,
    /// Server-to-client spec.
    pub downlink: LinkSpec,
    /// Device facing the client network.
    pub client_side: String,
    /// Device facing the server network.
    pub server_side: String,
    /// TUN device names (uplink, downlink).
    pub tun_names: (String, String),
    /// Routing tables for the two directions (uplink, downlink).
    pub tables: (u32, u32),
    /// Priority of the first policy rule; the second uses the next number, and the self-probe's
    /// two temporary rules (present only while the wire starts) the two after that.
    pub rule_priority: u32,
    /// Seed of the loss and jitter generator.
    pub seed: u64,
    /// A link across machines: the client's address leaves the server side as the link
    /// host's own there, and comes back ([`nat`]). So that the replies to that address, one
    /// of the link host's own, reach the wire instead of the host's own stack, the kernel's
    /// `local` table rule moves after the wire's rules while it runs; and as the client's
    /// packets re-enter from the TUN with a source that is the host's own, the host needs
    /// `net.ipv4.conf.all.accept_local=1` (checked at start).
    pub masquerade: Option<echolab_core::cmd::Masquerade>,
}

/// How far after the wire's first rule the `local` table's rule moves when it masquerades:
/// behind the wire's four rules, ahead of `main` (32766).
const LOCAL_RULE_OFFSET: u32 = 100;

/// How precisely the wire keeps its schedule, and what that costs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// How long before each release a direction wakes and polls instead of sleeping. Larger
    /// margins absorb slower wake-ups at the price of that much polling per release (only
    /// while a release is pending; an idle wire sleeps). 0 sleeps until the release itself.
    pub(crate) early_wake: Duration,
    /// The startup self-probe per direction, whose median overhead is subtracted from the
    /// propagation delay; a count of 0 turns compensation off.
    pub(crate) probe: probe::ProbePlan,
}

impl Default for Timing {
    /// A 400 µs cap on the early wake-up. The margin used below the cap follows the
    /// wake-ups' 90th percentile from a 50 µs start, or is 3% of a long wait where that is
    /// more (see [`pump::Pump::early_wake_ns`]); a
    /// 50 µs cap, the lateness of a busy host, left crossnet's releases 20–60 µs late at the
    /// median on a 2-core VM, where a thread waking from a 10 ms sleep is 60–110 µs late
    /// (`examples/wire_perf.rs`); with 400 µs they are 0.3 µs late. 64 probes
    /// 500 µs apart (only without kernel stamps): 32 ms of startup.
    fn default() -> Self {
        Self {
            early_wake: Duration::from_micros(400),
            probe: probe::ProbePlan {
                count: 64,
                spacing: Duration::from_micros(500),
            },
        }
    }
}

/// A running wire. Stop it with [`Wire::stop`]; dropping it also stops it and removes its
/// rules.
pub struct Wire {
    config: WireConfig,
    stop: Arc<StopSignal>,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
    counters: [Arc<Mutex<DirectionTally>>; 2],
    limits: [usize; 2],
    rules: Vec<Rule>,
    /// The kernel's `local` rule was moved (masquerading): put it back at priority 0 first
    /// when stopping.
    local_moved: bool,
    started: Instant,
}

/// Why the wire could not start or failed while running.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// A device, TUN or netlink request failed.
    #[error("{0}")]
    Setup(String),
    /// A direction's thread failed.
    #[error("{0}")]
    Run(String),
}

fn setup_err(e: impl std::fmt::Display) -> WireError {
    WireError::Setup(e.to_string())
}

impl Wire {
    /// [`Wire::start_with`] the default [`Timing`].
    ///
    /// # Errors
    /// As [`Wire::start_with`].
    pub fn start(config: WireConfig) -> Result<Self, WireError> {
        Self::start_with(config, Timing::default())
    }

    /// Creates the TUNs and their arrival taps, checks the sysctls, installs routes, starts
    /// both directions (which, without taps, each measure their own overhead with the
    /// self-probe), then installs the rules. When it returns, packets arriving on either side
    /// go through the wire.
    ///
    /// # Errors
    /// A missing device, no `/dev/net/tun` or NET_ADMIN, a sysctl that is wrong and cannot be
    /// set (named), or a refused netlink request. Rules already installed are removed. A
    /// self-probe that fails is not an error: that direction runs uncompensated, said on
    /// stderr and visible as `compensation_us: 0` in the stats.
    pub(crate) fn start_with(config: WireConfig, timing: Timing) -> Result<Self, WireError> {
        for dev in [&config.client_side, &config.server_side] {
            plumbing::index_of(dev).map_err(setup_err)?;
        }
        let (up_name, down_name) = (&config.tun_names.0, &config.tun_names.1);
        let tun_up = plumbing::open_tun(up_name).map_err(setup_err)?;
        let tun_down = plumbing::open_tun(down_name).map_err(setup_err)?;
        // Kernel arrival stamps for both directions, or for neither: then both fall back to
        // read times and the self-probe's compensation. Opened before the TUNs come up, so
        // that the tap sees every packet the kernel ever queues in them.
        let taps = [up_name, down_name]
            .map(|name| plumbing::index_of(name).and_then(arrival::ArrivalTap::open));
        let (tap_up, tap_down, timing) = match taps {
            [Ok(up), Ok(down)] => (
                Some(up),
                Some(down),
                Timing {
                    probe: probe::ProbePlan {
                        count: 0,
                        ..timing.probe
                    },
                    ..timing
                },
            ),
            [up, down] => {
                let e = up.err().or(down.err()).expect("one failed");
                eprintln!("echolab-netem wire: no kernel arrival stamps ({e}; a packet socket needs CAP_NET_RAW); delays count from read time, minus the self-probe's median");
                (None, None, timing)
            }
        };
        plumbing::ensure_forwarding_sysctls(&[up_name, down_name]).map_err(WireError::Setup)?;
        if config.masquerade.is_some() {
            plumbing::ensure_sysctl("net.ipv4.conf.all.accept_local", "1", &[])
                .map_err(WireError::Setup)?;
        }
        let rewrites = config.masquerade.map(|m| {
            [
                nat::Rewrite {
                    field: nat::Field::Source,
                    from: m.client,
                    to: m.shared,
                },
                nat::Rewrite {
                    field: nat::Field::Destination,
                    from: m.shared,
                    to: m.client,
                },
            ]
        });
        let mut sock = Socket::open().map_err(setup_err)?;
        let specs = [
            (up_name, config.tables.0, &config.uplink),
            (down_name, config.tables.1, &config.downlink),
        ];
        for (name, table, spec) in specs {
            let idx = plumbing::index_of(name).map_err(setup_err)?;
            plumbing::link_up(&mut sock, idx, name, spec.effective_limit().max(1000))
                .map_err(setup_err)?;
            plumbing::default_route_via(&mut sock, idx, table, name).map_err(setup_err)?;
        }
        let stop = StopSignal::new().map_err(setup_err)?;
        let counters = [
            Arc::new(Mutex::new(DirectionTally::default())),
            Arc::new(Mutex::new(DirectionTally::default())),
        ];
        let (probed_tx, probed_rx) = mpsc::channel();
        let early_wake_ns = timing.early_wake.as_nanos() as u64;
        let up = Pump {
            name: "uplink",
            tun: tun_up,
            shaper: shaper::Shaper::new(&config.uplink, config.seed),
            counters: counters[0].clone(),
            early_wake_ns,
            probe: timing.probe,
            probed: probed_tx.clone(),
            tap: tap_up,
            rewrite: rewrites.map(|r| r[0]),
        };
        let down = Pump {
            name: "downlink",
            tun: tun_down,
            shaper: shaper::Shaper::new(&config.downlink, config.seed.wrapping_add(1)),
            counters: counters[1].clone(),
            early_wake_ns,
            probe: timing.probe,
            probed: probed_tx,
            tap: tap_down,
            rewrite: rewrites.map(|r| r[1]),
        };
        let limits = [up.shaper.limit(), down.shaper.limit()];
        let mut wire = Self {
            config: config.clone(),
            stop: stop.clone(),
            threads: Vec::new(),
            counters,
            limits,
            rules: Vec::new(),
            local_moved: false,
            started: Instant::now(),
        };
        // Probe rules first: each TUN's probe packets are forwarded straight back into it.
        let probe_rules = [
            (up_name, config.tables.0, config.rule_priority + 2),
            (down_name, config.tables.1, config.rule_priority + 3),
        ]
        .map(|(tun, table, priority)| Rule {
            iif: tun.clone(),
            dst: Some(probe::PROBE_DST),
            ip_proto: None,
            table,
            priority,
        });
        if timing.probe.count > 0 {
            for rule in &probe_rules {
                plumbing::add_rule(&mut sock, rule).map_err(setup_err)?;
                wire.rules.push(rule.clone());
            }
        }
        for pump in [up, down] {
            let stop = stop.clone();
            let name = pump.name;
            let handle = std::thread::Builder::new()
                .name(format!("wire-{name}"))
                .spawn(move || pump.run(stop))
                .map_err(setup_err)?;
            wire.threads.push(handle);
        }
        let probe_deadline =
            Instant::now() + timing.probe.spacing * timing.probe.count + Duration::from_secs(5);
        for _ in 0..2 {
            let left = probe_deadline.saturating_duration_since(Instant::now());
            match probed_rx.recv_timeout(left) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    eprintln!("echolab-netem wire: {e}; running without overhead compensation")
                }
                Err(_) => {
                    return Err(match wire.failed() {
                        Some(e) => e,
                        None => WireError::Setup("the self-probe did not finish in time".into()),
                    })
                }
            }
        }
        for rule in probe_rules.iter().filter(|_| timing.probe.count > 0) {
            plumbing::delete_rule(&mut sock, rule).map_err(setup_err)?;
            wire.rules.retain(|r| r != rule);
        }
        // Traffic rules last: until they exist, traffic is forwarded unimpaired, never
        // black-holed.
        // Masquerading, the rules come before the `local` table's (moved behind them below)
        // and so match TCP and UDP only (see `Rule::ip_proto`); otherwise every packet.
        let protocols: &[Option<u8>] = if config.masquerade.is_some() {
            &[Some(libc::IPPROTO_TCP as u8), Some(libc::IPPROTO_UDP as u8)]
        } else {
            &[None]
        };
        for &ip_proto in protocols {
            let rules = [
                Rule {
                    iif: config.client_side.clone(),
                    dst: None,
                    ip_proto,
                    table: config.tables.0,
                    priority: config.rule_priority,
                },
                Rule {
                    iif: config.server_side.clone(),
                    dst: None,
                    ip_proto,
                    table: config.tables.1,
                    priority: config.rule_priority + 1,
                },
            ];
            for rule in rules {
                plumbing::add_rule(&mut sock, &rule).map_err(setup_err)?;
                wire.rules.push(rule);
            }
        }
        if config.masquerade.is_some() {
            let moved = plumbing::local_rule(config.rule_priority + LOCAL_RULE_OFFSET);
            plumbing::add_rule(&mut sock, &moved).map_err(setup_err)?;
            wire.rules.push(moved);
            plumbing::delete_rule(&mut sock, &plumbing::local_rule(0)).map_err(setup_err)?;
            wire.local_moved = true;
        }
        wire.started = Instant::now();
        Ok(wire)
    }

    /// One line for the log: which device goes through which TUN, what delays count from
    /// (kernel stamps, or read times with the self-probe's compensation), the early
    /// wake-up and the direction threads' scheduling class.
    pub fn describe(&self) -> String {
        let c = &self.config;
        let s = self.stats(false);
        let scheduling = if s.uplink.scheduling == s.downlink.scheduling {
            s.uplink.scheduling.clone()
        } else {
            format!(
                "uplink {} downlink {}",
                s.uplink.scheduling, s.downlink.scheduling
            )
        };
        format!(
            "uplink {} -> {} -> {}, downlink {} -> {} -> {}, seed {}, delay from {}, compensation uplink {:.1} us downlink {:.1} us (self-probe median), early wake {:.0} us, scheduling {scheduling}",
            c.client_side,
            c.tun_names.0,
            c.server_side,
            c.server_side,
            c.tun_names.1,
            c.client_side,
            c.seed,
            s.uplink.arrival_from,
            s.uplink.compensation_us,
            s.downlink.compensation_us,
            s.uplink.early_wake_us,
        )
    }

    /// A snapshot of the counters.
    pub fn stats(&self, is_final: bool) -> WireStats {
        // Clone under the lock and encode outside it, so a report never stalls a direction.
        let device_drops = self.device_drops();
        let snap = |i: usize| {
            let copy = self.counters[i]
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let mut stats = copy.to_stats(self.limits[i]);
            stats.drops_device = device_drops[i];
            stats
        };
        WireStats {
            tool: "echolab-netem wire".into(),
            profile: self.config.profile.clone(),
            seed: self.config.seed,
            uptime_s: self.started.elapsed().as_secs_f64(),
            is_final,
            uplink: snap(0),
            downlink: snap(1),
        }
    }

    /// Packets the kernel dropped at each TUN's queue (uplink, downlink); `None` once the TUN
    /// is gone or its counter cannot be read.
    fn device_drops(&self) -> [Option<u64>; 2] {
        [&self.config.tun_names.0, &self.config.tun_names.1].map(|t| plumbing::tx_dropped(t))
    }

    /// The first direction that has stopped on its own, with its error.
    pub fn failed(&mut self) -> Option<WireError> {
        let i = self.threads.iter().position(|t| t.is_finished())?;
        let t = self.threads.remove(i);
        Some(match t.join() {
            Ok(Ok(())) => WireError::Run("a direction stopped without being asked".into()),
            Ok(Err(e)) => WireError::Run(e.to_string()),
            Err(_) => WireError::Run("a direction panicked".into()),
        })
    }

    /// Removes the rules (traffic then flows unimpaired), stops both directions and returns
    /// the final stats.
    ///
    /// # Errors
    /// A direction had failed, or a rule could not be removed.
    pub fn stop(mut self) -> Result<WireStats, WireError> {
        // The TUNs' own drop counters go with the TUNs: read them while the devices exist.
        let device_drops = self.device_drops();
        let (teardown, run) = self.shutdown();
        let mut stats = self.stats(true);
        stats.uplink.drops_device = device_drops[0];
        stats.downlink.drops_device = device_drops[1];
        teardown.and(run).map(|()| stats)
    }

    fn shutdown(&mut self) -> (Result<(), WireError>, Result<(), WireError>) {
        let mut teardown = Ok(());
        if !self.rules.is_empty() {
            match Socket::open() {
                Ok(mut sock) => {
                    // The kernel's own rule back before the moved one goes, so that the
                    // host never runs without a `local` lookup.
                    if std::mem::take(&mut self.local_moved) {
                        if let Err(e) = plumbing::add_rule(&mut sock, &plumbing::local_rule(0)) {
                            teardown = Err(setup_err(e));
                        }
                    }
                    for rule in self.rules.drain(..) {
                        if let Err(e) = plumbing::delete_rule(&mut sock, &rule) {
                            teardown = Err(setup_err(e));
                        }
                    }
                }
                Err(e) => teardown = Err(setup_err(e)),
            }
        }
        self.stop.raise();
        let mut run = Ok(());
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => run = Err(WireError::Run(e.to_string())),
                Err(_) => run = Err(WireError::Run("a direction panicked".into())),
            }
        }
        (teardown, run)
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
