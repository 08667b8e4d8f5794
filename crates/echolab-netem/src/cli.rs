//! The command line of `echolab-netem`, in the library so that the launcher's tests can parse
//! the command lines it builds (`echolab_core::cmd::NetemCmd`) with this definition.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use echolab_core::cmd::Ipv4Net;
use echolab_core::inputs::PROFILES_DIR;
use echolab_core::limits;
use echolab_core::profile::Profile;

const EXAMPLES: &str = "\
Examples (on the link host unless said otherwise):
  echolab-netem probe
      {\"has_netem\":false,\"reason\":\"kernel 6.18 has no sch_netem module: ...\",...}
  echolab-netem apply --profile netem/crossnet.yaml --uplink-dev eth1 --downlink-dev eth0
      kernel netem: uplink spec on eth1 (towards the server), downlink on eth0; prints the read-back
  echolab-netem show eth1
  echolab-netem clear --dev eth0 --dev eth1
  echolab-netem wire --profile crossnet --client-side eth0 --server-side eth1 --stats-interval 10s
      userspace wire; `echolab-netem wire ready: ...` on stderr once it carries packets,
      stats JSON on stdout on SIGUSR1, every --stats-interval and on SIGTERM/SIGINT
  echolab-netem calib-server --port 7070                      (on the server host)
  echolab-netem rtt --target 10.0.2.2:7070      (on the client host, before the link is installed)
      {\"target\":\"10.0.2.2:7070\",\"probes\":120,\"rtt_min_us\":24.1,\"rtt_median_us\":31.0,\"round_medians_us\":[33.2,31.0,31.4],...}
  echolab-netem calibrate --target 10.0.2.2:7070 --profile crossnet --baseline-rtt 31us --json
      (on the client host, once the link is installed)
  echolab-netem route --dst 10.0.2.0/24 --via 10.0.1.2     (in a client host, with NET_ADMIN)
  echolab-netem ifname 10.0.1.2
      eth0
  echolab-netem masquerade --client 172.21.0.3 --out eth1
      (link host across machines) the client's packets leave eth1 with eth1's address
  echolab-netem masquerade --remove

A profile is a file path, or a name looked up as <profile-dir>/<name>.yaml (then .yml; default
dir: netem). echolab-up passes the profile it resolved as --profile-json instead.
Exit status: 0 success, 1 failure (calibration failed, kernel refused), 2 bad input.";

/// echolab-netem's command line.
#[derive(Debug, Parser)]
#[command(name = "echolab-netem", version, about = "echolab's link impairment: kernel netem over netlink, userspace TUN wire, probe and calibration", after_help = EXAMPLES)]
pub struct Cli {
    /// Directory where profile names are looked up.
    #[arg(long, global = true, default_value = PROFILES_DIR)]
    pub profile_dir: PathBuf,
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

/// Which profile: a name or file, or the profile itself as JSON (exactly one).
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct ProfileArg {
    /// Profile file, or name looked up in --profile-dir.
    #[arg(long)]
    pub profile: Option<String>,
    /// The profile itself, as JSON (what echolab-up passes: the profile it resolved and
    /// checked, so no host looks a name up again).
    #[arg(long, value_name = "JSON", value_parser = profile_json)]
    pub profile_json: Option<Profile>,
}

fn profile_json(text: &str) -> Result<Profile, String> {
    Profile::from_json(text, "--profile-json").map_err(|e| e.to_string())
}

/// The subcommands (fields are the flags, documented in `--help`).
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Says whether this kernel has sch_netem (JSON: has_netem, reason, method).
    Probe,
    /// Installs the profile as kernel netem qdiscs (replace: idempotent) and prints the read-back JSON.
    Apply {
        /// The profile.
        #[command(flatten)]
        profile: ProfileArg,
        /// Device whose egress carries uplink traffic (the link host's server-side device; a
        /// name, or an IPv4 address the device holds).
        #[arg(long)]
        uplink_dev: String,
        /// Device whose egress carries downlink traffic (the link host's client-side device; a
        /// name, or an IPv4 address the device holds).
        #[arg(long)]
        downlink_dev: String,
    },
    /// Removes the root qdisc of each device (JSON: device -> whether something was removed).
    Clear {
        /// Device (a name, or an IPv4 address it holds); repeat for several.
        #[arg(long = "dev", required = true)]
        devs: Vec<String>,
    },
    /// Prints the root qdisc of a device as JSON: its kind, netem's settings read back, and
    /// its counters since it was created (`stats`: bytes and packets sent, drops, overlimits,
    /// requeues, backlog; as `tc -s qdisc show` prints them).
    Show {
        /// Device (a name, or an IPv4 address it holds).
        dev: String,
    },
    /// Runs the userspace wire until SIGTERM/SIGINT; stats JSON on stdout.
    Wire {
        /// The profile.
        #[command(flatten)]
        profile: ProfileArg,
        /// Device facing the client network (a name, or an IPv4 address the device holds).
        #[arg(long)]
        client_side: String,
        /// Device facing the server network (a name, or an IPv4 address the device holds).
        #[arg(long)]
        server_side: String,
        /// Also print stats this often (e.g. "10s"; above 0s, at most 24h).
        #[arg(long, value_parser = limits::nonzero_duration)]
        stats_interval: Option<Duration>,
        /// Seed for loss and jitter (default: from the clock; printed in the stats).
        #[arg(long)]
        seed: Option<u64>,
        /// TUN device for the uplink.
        #[arg(long, default_value = "elab-up")]
        tun_up: String,
        /// TUN device for the downlink.
        #[arg(long, default_value = "elab-down")]
        tun_down: String,
        /// Routing table for the uplink (the downlink uses the next number); neither may be
        /// 0 or one of the kernel's own (253 default, 254 main, 255 local).
        #[arg(long, default_value_t = 2701, value_parser = route_table)]
        table: u32,
        /// Priority of the uplink policy rule (the downlink uses the next number), from 1 to
        /// 32665: the wire's rules and the kernel's `local` rule moved 100 behind them must
        /// all come before the kernel's `main` rule at 32766.
        #[arg(long, default_value_t = 100,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_RULE_PRIORITY)))]
        rule_priority: u32,
        /// A link across machines: packets from this client address leave the server side
        /// with the --masquerade-as address, and packets to that address come back to it,
        /// ICMP errors translated inside their quoted packet too (stateless; the kernel's
        /// `local` rule moves behind the wire's while it runs, and the host needs
        /// net.ipv4.conf.all.accept_local=1).
        #[arg(long, value_name = "IPV4", requires = "masquerade_as")]
        masquerade_client: Option<std::net::Ipv4Addr>,
        /// The link host's own address on the server side that --masquerade-client's
        /// packets take.
        #[arg(long, value_name = "IPV4", requires = "masquerade_client")]
        masquerade_as: Option<std::net::Ipv4Addr>,
    },
    /// Measures RTT and goodput to a calib-server and compares them with the profile.
    Calibrate {
        /// The calib-server, IP:PORT.
        #[arg(long)]
        target: SocketAddr,
        /// The profile.
        #[command(flatten)]
        profile: ProfileArg,
        /// Print the report as JSON (otherwise one line per check).
        #[arg(long)]
        json: bool,
        /// RTT probes (20 to 10000).
        #[arg(long, default_value_t = 40, value_parser = probes())]
        probes: usize,
        /// Attempts at most (1..=10): a calibration that misses is measured again after a
        /// wait for a steady machine (for 0.3 s: /proc/stat below 10% busy and timer
        /// wake-ups at most 300 us late at p99; at most 20 s),
        /// since a miss the host caused is gone then and a link not in effect misses every
        /// time. The verdict is the last attempt's; the report keeps each miss
        /// (`missed_attempts`).
        #[arg(long, default_value_t = crate::calibrate::attempts::DEFAULT_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..=10))]
        attempts: u32,
        /// Measured bulk transfer time per direction, after a 0.3 s warm-up (above 0s, at
        /// most 24h).
        #[arg(long, default_value = "1s", value_parser = limits::nonzero_duration)]
        measure: Duration,
        /// Measure goodput even when the profile expects none.
        #[arg(long)]
        goodput: bool,
        /// Median RTT of the same path before the link was installed (what `rtt --pace`
        /// printed, paced by the RTT this profile adds);
        /// with it, calibration also checks the RTT the link adds (`added_rtt`) against the
        /// profile's delays, within `expected.added_rtt`'s tolerance.
        /// At most 24h.
        #[arg(long, value_name = "DURATION", value_parser = limits::duration)]
        baseline_rtt: Option<Duration>,
        /// The link is between two machines: judge the median RTT as the baseline (the real
        /// path) plus the RTT the profile adds, instead of the profile's one-machine
        /// `expected.rtt`. Needs --baseline-rtt.
        #[arg(long, requires = "baseline_rtt")]
        across_machines: bool,
    },
    /// Times small TCP round trips to a calib-server and prints them as JSON, judged against
    /// nothing: the baseline for `calibrate --baseline-rtt`, measured before the link is
    /// installed.
    Rtt {
        /// The calib-server, IP:PORT.
        #[arg(long)]
        target: SocketAddr,
        /// Round trips per round (20 to 10000).
        #[arg(long, default_value_t = 40, value_parser = probes())]
        probes: usize,
        /// Rounds (1..=10), each after the first preceded by a wait for a steady machine
        /// (as for `calibrate --attempts`); the report's
        /// `rtt_median_us` is the lowest round median, since host noise only adds delay.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10))]
        rounds: u32,
        /// Pause after each round trip: the RTT the link to be calibrated will add to a 68-byte
        /// probe (its delays plus serialization, each way; echolab-up passes it), so the server
        /// idles as long between probes as it will through the link, and its slower wake-up
        /// from that idle is in the baseline too instead of being charged to the link. The
        /// prober polls for each answer, here and in `calibrate`. At most 24h.
        #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = limits::duration)]
        pace: Duration,
    },
    /// Serves calibration probes and transfers (echo, sink, source) until killed.
    CalibServer {
        /// TCP port (0: any; the chosen one is printed).
        #[arg(long)]
        port: u16,
        /// Address to bind.
        #[arg(long, default_value = "0.0.0.0")]
        bind: IpAddr,
    },
    /// Sets `ip route replace DST via VIA` in the main routing table, over rtnetlink (needs
    /// NET_ADMIN in this network namespace).
    Route {
        /// Destination network, e.g. 10.0.2.0/24.
        #[arg(long)]
        dst: Ipv4Net,
        /// Gateway, e.g. the link host's address on this host's network.
        #[arg(long)]
        via: Ipv4Addr,
    },
    /// Prints the name of the network device that holds an IPv4 address (getifaddrs(3)).
    Ifname {
        /// The address.
        address: Ipv4Addr,
    },
    /// Masquerades one client address to the output device's own address (the kernel's
    /// source NAT: an nftables table `echolab-masquerade`, sent over netlink; needs
    /// CAP_NET_ADMIN), so that a link across machines can use kernel netem; or removes it.
    Masquerade {
        /// The client host's address, the only source translated.
        #[arg(long, required_unless_present = "remove", requires = "out")]
        client: Option<Ipv4Addr>,
        /// The device (name) towards the server; packets leaving through it get its address.
        #[arg(long, requires = "client")]
        out: Option<String>,
        /// Remove the table instead, and flush this namespace's IPv4 conntrack table so that
        /// no connection stays translated (nothing to remove is not an error).
        #[arg(long, conflicts_with_all = ["client", "out"])]
        remove: bool,
    },
}

/// The fewest RTT probes (`--probes`): 20, so that a median stands on enough samples to be
/// stable.
pub const MIN_PROBES: usize = 20;

/// The most RTT probes (`--probes`): 10,000; at a 120 ms satellite round trip that is 20
/// minutes of probing, and the probes' RTTs are held in memory.
pub const MAX_PROBES: usize = 10_000;

/// The highest `--rule-priority`: the wire's four rules and the kernel's `local` rule moved
/// 100 behind the first must all come before the kernel's `main` rule at 32766.
pub const MAX_RULE_PRIORITY: u32 = 32_766 - 101;

fn probes() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(MIN_PROBES as u64..=MAX_PROBES as u64)
}

/// `--table`: the uplink's table and the next (the downlink's), neither 0 (unspecified) nor
/// one of the kernel's 253 (default), 254 (main) and 255 (local).
fn route_table(s: &str) -> Result<u32, String> {
    let t: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("invalid routing table {s:?}: expected a number"))?;
    if t == 0 || (252..=255).contains(&t) || t == u32::MAX {
        return Err(format!(
            "invalid routing table {s:?}: must be from 1 to 4294967294, not 252 to 255 \
             (it and the next number must not be 0, default 253, main 254 or local 255)"
        ));
    }
    Ok(t)
}
