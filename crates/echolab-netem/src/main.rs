//! `echolab-netem`: apply, inspect and calibrate echolab's link impairment.

use std::net::TcpListener;
use std::path::Path;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use clap::Parser;
use echolab_core::cli::EXIT_USAGE;
use echolab_core::cmd::{CalibServerReady, WIRE_READY_PREFIX};
use echolab_core::profile::{Profile, Topology};
use echolab_netem::calibrate::{self, CalibrationPlan};
use echolab_netem::cli::{Cli, Cmd, ProfileArg};
use echolab_netem::kernel;
use echolab_netem::netdev;
use echolab_netem::route;
use echolab_netem::wire::{Wire, WireConfig};

/// A failure with its exit status: [`EXIT_USAGE`] for bad input, 1 for everything else.
struct Failure(u8, String);

fn bad_input(msg: impl std::fmt::Display) -> Failure {
    Failure(EXIT_USAGE, msg.to_string())
}
fn failed(msg: impl std::fmt::Display) -> Failure {
    Failure(1, msg.to_string())
}

/// The profile given as JSON, or the one a name or path resolves to (core's one resolver).
fn load_profile(dir: &Path, arg: ProfileArg) -> Result<Profile, Failure> {
    match (arg.profile_json, arg.profile) {
        (Some(p), _) => Ok(p),
        (None, Some(name)) => Profile::resolve(&name, dir)
            .map(|(_, p)| p)
            .map_err(bad_input),
        (None, None) => Err(bad_input("no profile: give --profile or --profile-json")),
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
            let p = load_profile(&cli.profile_dir, profile)?;
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
            masquerade_client,
            masquerade_as,
        } => {
            let p = load_profile(&cli.profile_dir, profile)?;
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
                masquerade: masquerade_client
                    .zip(masquerade_as)
                    .map(|(client, shared)| echolab_core::cmd::Masquerade { client, shared }),
            };
            run_wire(config, stats_interval)
        }
        Cmd::Calibrate {
            target,
            profile,
            json,
            probes,
            attempts,
            measure,
            goodput,
            baseline_rtt,
            across_machines,
        } => {
            let p = load_profile(&cli.profile_dir, profile)?;
            if baseline_rtt.is_some() && p.topology != Topology::Link {
                return Err(bad_input(format!(
                    "--baseline-rtt: profile {} is {}, which adds no RTT to check",
                    p.name,
                    p.topology.name()
                )));
            }
            let plan = CalibrationPlan {
                probes,
                measure,
                baseline_rtt,
                across_machines,
                ..CalibrationPlan::default()
            };
            let report = echolab_netem::calibrate::attempts::with_attempts(
                attempts,
                || calibrate::calibrate(&p, target, &plan, goodput),
                || steady_or_warn("a repeated calibration"),
            )
            .map_err(|e| {
                failed(format!(
                    "calibration against {target}: {}",
                    calibrate::explain(&e)
                ))
            })?;
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
        Cmd::Rtt {
            target,
            probes,
            rounds,
            pace,
        } => {
            let report = calibrate::rtt_report(target, (probes, rounds), pace, || {
                steady_or_warn("a baseline round");
            })
            .map_err(|e| {
                failed(format!(
                    "round trips to {target}: {}",
                    calibrate::explain(&e)
                ))
            })?;
            print_json(&report);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::CalibServer { port, bind } => {
            let listener = TcpListener::bind((bind, port))
                .map_err(|e| failed(format!("bind {bind}:{port}: {e}")))?;
            let addr = listener.local_addr().map_err(failed)?;
            eprintln!("{}", CalibServerReady { addr });
            calibrate::serve(listener)
        }
        Cmd::Route { dst, via } => {
            route::replace_in_main_table(dst, via).map_err(failed)?;
            eprintln!("echolab-netem route: {dst} via {via}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Ifname { address } => {
            println!("{}", netdev::device_with_address(address).map_err(failed)?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Masquerade {
            client: Some(client),
            out: Some(out),
            ..
        } => {
            kernel::masquerade::install(client, &out).map_err(failed)?;
            eprintln!("echolab-netem masquerade: {client} out of {out}, as {out}'s address");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Masquerade { .. } => {
            let removed = kernel::masquerade::remove().map_err(failed)?;
            eprintln!(
                "echolab-netem masquerade: {}",
                if removed {
                    "removed"
                } else {
                    "nothing to remove"
                }
            );
            Ok(ExitCode::SUCCESS)
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
    eprintln!("{WIRE_READY_PREFIX}{}", wire.describe());
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

/// Waits for a steady machine (`echolab_core::quiet`: idle CPUs, timer wake-ups on time)
/// before the measurement named `what`,
/// warning on stderr when the wait ended busy.
fn steady_or_warn(what: &str) -> Option<echolab_core::results::Settle> {
    let settle =
        echolab_core::quiet::wait_for_quiet_blocking(echolab_core::quiet::Condition::Steady);
    if let Some(w) =
        settle.and_then(|s| echolab_core::quiet::busy_warning("echolab-netem", what, &s))
    {
        eprintln!("{w}");
    }
    settle
}
