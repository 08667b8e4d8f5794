//! `echolab-netem`: apply, inspect and calibrate echolab's link impairment.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use echolab_core::profile::{Profile, Topology};
use echolab_core::units::parse_duration;
use echolab_netem::calibrate::{self, CalibrationPlan};
use echolab_netem::kernel;
use echolab_netem::netdev;
use echolab_netem::wire::{Wire, WireConfig};

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
  echolab-netem calibrate --target 10.0.2.2:7070 --profile crossnet --json   (on the client host)

A profile is a file path, or a name looked up as <profile-dir>/<name>.yaml (default dir: netem).
Exit status: 0 success, 1 failure (calibration failed, kernel refused), 2 bad input.";

#[derive(Parser)]
#[command(name = "echolab-netem", version, about = "echolab's link impairment: kernel netem over netlink, userspace TUN wire, probe and calibration", after_help = EXAMPLES)]
struct Cli {
    /// Directory where profile names are looked up.
    #[arg(long, global = true, default_value = "netem")]
    profile_dir: PathBuf,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Says whether this kernel has sch_netem (JSON: has_netem, reason, method).
    Probe,
    /// Installs the profile as kernel netem qdiscs (replace: idempotent) and prints the read-back JSON.
    Apply {
        /// Profile file or name.
        #[arg(long)]
        profile: String,
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
    /// Prints the root qdisc of a device as JSON.
    Show {
        /// Device (a name, or an IPv4 address it holds).
        dev: String,
    },
    /// Runs the userspace wire until SIGTERM/SIGINT; stats JSON on stdout.
    Wire {
        /// Profile file or name.
        #[arg(long)]
        profile: String,
        /// Device facing the client network (a name, or an IPv4 address the device holds).
        #[arg(long)]
        client_side: String,
        /// Device facing the server network (a name, or an IPv4 address the device holds).
        #[arg(long)]
        server_side: String,
        /// Also print stats this often (e.g. "10s").
        #[arg(long, value_parser = parse_duration)]
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
        /// Routing table for the uplink (the downlink uses the next number).
        #[arg(long, default_value_t = 2701)]
        table: u32,
        /// Priority of the uplink policy rule (the downlink uses the next number).
        #[arg(long, default_value_t = 100)]
        rule_priority: u32,
    },
    /// Measures RTT and goodput to a calib-server and compares them with the profile.
    Calibrate {
        /// The calib-server, IP:PORT.
        #[arg(long)]
        target: SocketAddr,
        /// Profile file or name.
        #[arg(long)]
        profile: String,
        /// Print the report as JSON (otherwise one line per check).
        #[arg(long)]
        json: bool,
        /// RTT probes (at least 20).
        #[arg(long, default_value_t = 40)]
        probes: usize,
        /// Measured bulk transfer time per direction, after a 0.3 s warm-up.
        #[arg(long, default_value = "1s", value_parser = parse_duration)]
        measure: Duration,
        /// Measure goodput even when the profile expects none.
        #[arg(long)]
        goodput: bool,
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
}

/// A failure with its exit status: 2 for bad input, 1 for everything else.
struct Failure(u8, String);

fn bad_input(msg: impl std::fmt::Display) -> Failure {
    Failure(2, msg.to_string())
}
fn failed(msg: impl std::fmt::Display) -> Failure {
    Failure(1, msg.to_string())
}

fn load_profile(dir: &Path, p: &str) -> Result<Profile, Failure> {
    let as_path = PathBuf::from(p);
    let path = if as_path.is_file() || p.contains('/') || p.ends_with(".yaml") {
        as_path
    } else {
        let named = dir.join(format!("{p}.yaml"));
        if !named.is_file() {
            return Err(bad_input(format!(
                "unknown profile {p:?}: no {} (profiles in {}: {}; or give a file path, or --profile-dir)",
                named.display(),
                dir.display(),
                available_profiles(dir)
            )));
        }
        named
    };
    Profile::load(&path).map_err(bad_input)
}

/// The profile names in `dir`, comma-separated, or a note that there are none.
fn available_profiles(dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    names.sort();
    if names.is_empty() {
        "none found".into()
    } else {
        names.join(", ")
    }
}

fn print_json<T: serde::Serialize>(v: &T) {
    println!(
        "{}",
        serde_json::to_string(v).expect("report types serialize")
    );
}

fn main() -> ExitCode {
    let cli = match echolab_core::cli::parsed_or_exit("echolab-netem", Cli::try_parse()) {
        Ok(c) => c,
        Err(code) => return ExitCode::from(code),
    };
    match run(cli) {
        Ok(code) => code,
        Err(Failure(code, msg)) => {
            eprintln!("echolab-netem: {msg}");
            ExitCode::from(code)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    match cli.command {
        Cmd::Probe => {
            print_json(&kernel::probe());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Apply {
            profile,
            uplink_dev,
            downlink_dev,
        } => {
            let p = load_profile(&cli.profile_dir, &profile)?;
            let (Some(up), Some(down)) = (&p.uplink, &p.downlink) else {
                return Err(bad_input(format!(
                    "profile {}: topology {:?} has no link to apply",
                    p.name, p.topology
                )));
            };
            let installed = vec![
                kernel::apply(
                    &netdev::resolve(&uplink_dev).map_err(bad_input)?,
                    "uplink",
                    up,
                )
                .map_err(failed)?,
                kernel::apply(
                    &netdev::resolve(&downlink_dev).map_err(bad_input)?,
                    "downlink",
                    down,
                )
                .map_err(failed)?,
            ];
            print_json(&installed);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Clear { devs } => {
            let mut out = serde_json::Map::new();
            for dev in devs {
                let name = netdev::resolve(&dev).map_err(bad_input)?;
                let removed = kernel::clear(&name).map_err(failed)?;
                out.insert(name, removed.into());
            }
            print_json(&out);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Show { dev } => {
            let name = netdev::resolve(&dev).map_err(bad_input)?;
            print_json(&kernel::show(&name).map_err(failed)?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Wire {
            profile,
            client_side,
            server_side,
            stats_interval,
            seed,
            tun_up,
            tun_down,
            table,
            rule_priority,
        } => {
            let p = load_profile(&cli.profile_dir, &profile)?;
            let (Some(up), Some(down)) = (p.uplink.clone(), p.downlink.clone()) else {
                return Err(bad_input(format!(
                    "profile {}: topology loopback has no link for a wire",
                    p.name
                )));
            };
            let seed = seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
            let config = WireConfig {
                profile: p.name.clone(),
                uplink: up,
                downlink: down,
                client_side: netdev::resolve(&client_side).map_err(bad_input)?,
                server_side: netdev::resolve(&server_side).map_err(bad_input)?,
                tun_names: (tun_up, tun_down),
                tables: (table, table + 1),
                rule_priority,
                seed,
            };
            run_wire(config, stats_interval)
        }
        Cmd::Calibrate {
            target,
            profile,
            json,
            probes,
            measure,
            goodput,
        } => {
            let p = load_profile(&cli.profile_dir, &profile)?;
            if probes < 20 {
                return Err(bad_input(format!(
                    "--probes {probes}: at least 20 are needed for a median"
                )));
            }
            let plan = CalibrationPlan {
                probes,
                measure,
                ..CalibrationPlan::default()
            };
            let report = calibrate::calibrate(&p, target, &plan, goodput)
                .map_err(|e| failed(format!("calibration against {target}: {e}")))?;
            if json {
                print_json(&report);
            } else {
                for c in &report.checks {
                    println!("{} {}", if c.pass { "ok  " } else { "FAIL" }, c.reason);
                }
                println!("{}", report.reason);
            }
            if p.topology == Topology::Loopback && report.pass {
                eprintln!("echolab-netem: loopback profile: no impairment expected");
            }
            Ok(if report.pass {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Cmd::CalibServer { port, bind } => {
            let listener = TcpListener::bind((bind, port))
                .map_err(|e| failed(format!("bind {bind}:{port}: {e}")))?;
            let addr = listener.local_addr().map_err(failed)?;
            eprintln!("echolab-netem calib-server listening on {addr}");
            calibrate::serve(listener)
        }
    }
}

enum Event {
    Signal(i32),
    Tick,
}

fn run_wire(config: WireConfig, stats_interval: Option<Duration>) -> Result<ExitCode, Failure> {
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
    // Signals are registered before the wire starts, so a SIGTERM during setup is not lost.
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGUSR1]).map_err(failed)?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in signals.forever() {
            if tx.send(Event::Signal(s)).is_err() {
                break;
            }
        }
    });
    let mut wire = Wire::start(config).map_err(failed)?;
    eprintln!("echolab-netem wire ready: {}", wire.describe());
    // Wake at least every second to notice a direction that died; an idle wire does no more.
    let tick = stats_interval
        .unwrap_or(Duration::from_secs(1))
        .min(Duration::from_secs(1));
    let mut next_stats = stats_interval.map(|i| std::time::Instant::now() + i);
    loop {
        let event = rx.recv_timeout(tick).map_or(Event::Tick, |e| e);
        if let Some(err) = wire.failed() {
            print_json(&wire.stats(true));
            return Err(failed(format!("wire stopped: {err}")));
        }
        match event {
            Event::Signal(SIGUSR1) => print_json(&wire.stats(false)),
            Event::Signal(_) => break,
            Event::Tick => {
                if let (Some(at), Some(every)) = (next_stats, stats_interval) {
                    if std::time::Instant::now() >= at {
                        print_json(&wire.stats(false));
                        next_stats = Some(at + every);
                    }
                }
            }
        }
    }
    let stats = wire.stop().map_err(failed)?;
    print_json(&stats);
    Ok(ExitCode::SUCCESS)
}
