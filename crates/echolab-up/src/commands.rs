//! The command lines of `echo-server` and `echo-bench` for one cell, as the typed builders of
//! `echolab_core::cmd`; what the binaries print back is parsed there too
//! (`Ready::parse`, `final_stats`, `bench_report`). `tests/argv.rs` parses every command line
//! these functions build with the binaries' own clap definitions.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use echolab_core::cmd::{
    BenchCmd, Pacing, RunArgs, RunMode, ServerCmd, ServerCpus, ServerLaunch, ServerModel,
    StormArgs, SustainArgs, UnknownModel,
};
use echolab_core::experiment::{BenchMode, Cell, Experiment};

/// The server for `cell`: echo-server listening on `bind` with a kernel-chosen port, or the
/// experiment's custom server of that name on its own port (the experiment's `server:`
/// options are echo-server's flags and do not apply to it).
///
/// # Errors
/// The cell names neither a model echo-server has nor a custom server of the experiment
/// (never for the cells of a loaded experiment, which are checked when it loads).
pub fn server_cmd(
    exp: &Experiment,
    cell: &Cell,
    bind: IpAddr,
) -> Result<ServerLaunch, UnknownModel> {
    if let Some(custom) = exp.custom_server(&cell.server) {
        return Ok(ServerLaunch::Custom(custom.cmd(bind)));
    }
    let model = cell.model()?;
    let mut opts = exp.server.clone();
    opts.exclusive &= model == ServerModel::Prefork;
    // A probe block's own setting: the saturated cells of the same server stay untimed.
    opts.time_syscalls |= cell.time_syscalls;
    Ok(ServerLaunch::Model(ServerCmd {
        reply_bytes: cell.reply_bytes,
        opts,
        ..ServerCmd::new(model, bind, 0)
    }))
}

/// echo-bench for `cell` against `target`, always with `--json`.
///
/// short/long: `HOST PORT CONNS [ROUNDS] --mode M` (a timed cell passes `--duration`
/// instead of ROUNDS); connect-storm: `connect-storm HOST PORT N` with the socket options
/// only; sustain: `sustain HOST PORT N --duration D [--reply-bytes B]`. The experiment's
/// `warmup` and `bench` options go to every form that takes them; `server_cpus` (from the
/// run's CPU plan, [`echolab_core::results::CpuPlanRecord::server_cpus`]) tells echo-bench
/// whether the server shares its CPUs, for its automatic `--threads`.
pub fn bench_cmd(
    exp: &Experiment,
    cell: &Cell,
    target: SocketAddr,
    server_cpus: ServerCpus,
) -> BenchCmd {
    let warmup = exp.warmup.map_or(Duration::ZERO, |w| w.0);
    let run = |mode| {
        BenchCmd::Run(RunArgs {
            rounds: cell.rounds,
            duration: cell.duration.map(|d| d.0),
            payload_size: cell.payload,
            pacing: Pacing {
                rate: cell.rate,
                warmup,
            },
            ..RunArgs::new(target, cell.conns, mode)
        })
    };
    let mut cmd = match cell.mode {
        BenchMode::Short => run(RunMode::Short),
        BenchMode::Long => run(RunMode::Long),
        BenchMode::ConnectStorm => BenchCmd::ConnectStorm(StormArgs::new(target, cell.conns)),
        BenchMode::Sustain => {
            // An experiment's `rate` is for its short/long cells only (a probe's).
            let mut sustain = SustainArgs::new(target, cell.conns);
            sustain.duration = cell.duration.map_or(sustain.duration, |d| d.0);
            sustain.reply_bytes = cell.reply_bytes.unwrap_or(sustain.reply_bytes);
            sustain.pacing.warmup = warmup;
            BenchCmd::Sustain(sustain)
        }
    };
    let shared = cmd.shared_mut();
    shared.client = exp.bench.clone();
    shared.sock.server_cpus = server_cpus;
    shared.out.json = true;
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp() -> Experiment {
        Experiment::parse(
            "name: t\nquestion: q\nrepetitions: 1\nwarmup: 1s\nmatrix:\n  - servers: [epoll-et]\n    modes: [long, connect-storm]\n    conns: [100]\n    rounds: [10]\nserver: {workers: 2}\nbench: {timeout: 2s}\n",
            "t.yaml",
        )
        .unwrap()
    }

    #[test]
    fn cells_become_command_lines() {
        let e = exp();
        let cells = e.cells();
        let s = server_cmd(&e, &cells[0], "127.0.0.1".parse().unwrap())
            .unwrap()
            .argv();
        assert_eq!(
            s.join(" "),
            "--model epoll-et --bind 127.0.0.1 --port 0 --workers 2"
        );
        let t: SocketAddr = "10.0.0.2:9988".parse().unwrap();
        assert_eq!(
            bench_cmd(&e, &cells[0], t, ServerCpus::Shared)
                .argv()
                .join(" "),
            "10.0.0.2 9988 100 10 --mode long --warmup 1s --server-cpus shared --timeout 2s --json"
        );
        assert_eq!(
            bench_cmd(&e, &cells[1], t, ServerCpus::Separate)
                .argv()
                .join(" "),
            "connect-storm 10.0.0.2 9988 100 --server-cpus separate --timeout 2s --json"
        );
    }

    #[test]
    fn a_probe_block_runs_open_loop_with_a_timed_server() {
        let e = Experiment::parse(
            "name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [short]\n    conns: [10]\n    rounds: [10]\n  - servers: [epoll-et]\n    modes: [short]\n    conns: [10]\n    rounds: [10]\n    rate: 500\n    time_syscalls: true\n",
            "t.yaml",
        )
        .unwrap();
        let t: SocketAddr = "10.0.0.2:9988".parse().unwrap();
        let lines: Vec<(String, String)> = e
            .cells()
            .iter()
            .map(|c| {
                let s = server_cmd(&e, c, "127.0.0.1".parse().unwrap())
                    .unwrap()
                    .argv()
                    .join(" ");
                (s, bench_cmd(&e, c, t, ServerCpus::Shared).argv().join(" "))
            })
            .collect();
        assert!(!lines[0].0.contains("--time-syscalls"), "{lines:?}");
        assert!(!lines[0].1.contains("--rate"), "{lines:?}");
        assert!(lines[1].0.ends_with("--time-syscalls"), "{lines:?}");
        assert!(lines[1].1.contains("--rate 500"), "{lines:?}");
    }

    #[test]
    fn exclusive_reaches_the_prefork_cells_only() {
        let e = Experiment::parse(
            "name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et, prefork]\n    modes: [long]\n    conns: [10]\n    rounds: [10]\nserver: {exclusive: true}\n",
            "t.yaml",
        )
        .unwrap();
        let exclusive: Vec<(String, bool)> = e
            .cells()
            .iter()
            .map(|c| {
                let argv = server_cmd(&e, c, "127.0.0.1".parse().unwrap())
                    .unwrap()
                    .argv();
                (c.server.clone(), argv.contains(&"--exclusive".to_string()))
            })
            .collect();
        assert_eq!(
            exclusive,
            [
                ("epoll-et".to_string(), false),
                ("prefork".to_string(), true)
            ]
        );
    }

    #[test]
    fn a_cell_with_an_unknown_model_gets_no_server_command() {
        let e = exp();
        let mut cell = e.cells().remove(0);
        cell.server = "epoll-zz".into();
        let err = server_cmd(&e, &cell, "127.0.0.1".parse().unwrap()).unwrap_err();
        assert!(err.to_string().contains("\"epoll-zz\""), "{err}");
    }
}
