//! echolab-up's in-image jobs: the small commands the launcher binary runs inside the lab
//! image so that the image needs no shell and no other tool (echolab-runtime's `hold` and
//! `custom_server` do them; `echolab-up`'s `main` only dispatches). They are one clap
//! subcommand enum, [`Job`]: the runtime builds each command line with [`Job::argv`], and the
//! launcher binary reads its own with [`Job::parse`], so a job's name and flags are spelled
//! here only. `parse(argv(x)) == x` is this module's test.

use std::fmt;

use clap::{FromArgMatches as _, Subcommand as _};

use super::CustomServerCmd;

/// A signal that `__signal` sends, by the name `kill -l` gives it (`TERM`; `SIGTERM` is taken
/// too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum JobSignal {
    /// SIGTERM: stop (echo-server prints its final stats).
    #[value(name = "TERM", alias = "SIGTERM")]
    Term,
    /// SIGKILL: stop at once (a process that did not stop, the calib-server).
    #[value(name = "KILL", alias = "SIGKILL")]
    Kill,
    /// SIGINT: as Ctrl-C.
    #[value(name = "INT", alias = "SIGINT")]
    Int,
    /// SIGUSR1: the userspace wire prints its counters (echolab-netem's `wire`).
    #[value(name = "USR1", alias = "SIGUSR1")]
    Usr1,
}

impl JobSignal {
    /// The signal's number (signal(7)).
    pub fn number(self) -> i32 {
        match self {
            JobSignal::Term => libc::SIGTERM,
            JobSignal::Kill => libc::SIGKILL,
            JobSignal::Int => libc::SIGINT,
            JobSignal::Usr1 => libc::SIGUSR1,
        }
    }
}

impl fmt::Display for JobSignal {
    /// The `__signal` value (`TERM`, `KILL`, `INT`, `USR1`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JobSignal::Term => "TERM",
            JobSignal::Kill => "KILL",
            JobSignal::Int => "INT",
            JobSignal::Usr1 => "USR1",
        })
    }
}

/// `__signal TARGET SIG`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct SignalJob {
    /// A pid (in the host's pid namespace), or a process name: every process of that name
    /// (/proc/PID/comm) but the job itself.
    #[arg(value_name = "PID|NAME")]
    pub target: String,
    /// The signal.
    #[arg(value_enum)]
    pub signal: JobSignal,
}

/// One in-image job of `echolab-up`: its first argument names it.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum Job {
    /// A host container's main process: it owns nothing but the namespaces, reaps orphaned
    /// children (as PID 1 must) and exits 0 on SIGTERM or SIGINT.
    #[command(name = "__hold")]
    Hold,
    /// Send a signal to a process by pid or name; exit 0 when at least one process got it.
    #[command(name = "__signal")]
    Signal(SignalJob),
    /// Print the machine's CPU model (/proc/cpuinfo's first "model name"), which a lab run
    /// records for each machine (an engine's API does not say it).
    #[command(name = "__cpu-model")]
    CpuModel,
    /// Run an experiment's own server: start it in a process group, check that it echoes,
    /// print echo-server's readiness line for it, stop the group on SIGTERM.
    #[command(name = "__serve")]
    Serve(CustomServerCmd),
}

impl Job {
    /// The program that runs every job: the launcher binary, present in every lab image.
    pub const PROGRAM: &'static str = "echolab-up";

    /// The arguments, without the program name (`["__signal", "echo-server", "KILL"]`).
    pub fn argv(&self) -> Vec<String> {
        let mut a = super::Argv::default();
        match self {
            Job::Hold => a.arg("__hold"),
            Job::Signal(s) => a.arg("__signal").arg(&s.target).arg(s.signal),
            Job::CpuModel => a.arg("__cpu-model"),
            Job::Serve(c) => return c.argv(),
        };
        a.done()
    }

    /// The whole command line, the program as found in `bin_dir` (the lab image's bin
    /// directory) followed by [`Job::argv`].
    pub fn command(&self, bin_dir: &str) -> Vec<String> {
        let mut out = vec![format!("{bin_dir}/{}", Self::PROGRAM)];
        out.extend(self.argv());
        out
    }

    /// The job that `args` (the launcher's arguments, without the program name) ask for, or
    /// `None` when the first one names no job (the launcher's own command line).
    ///
    /// # Errors
    /// A job's arguments that clap refuses (a missing `--port`, a signal it does not know);
    /// the error names the argument and the value.
    pub fn parse(args: &[String]) -> Option<Result<Job, clap::Error>> {
        let name = args.first()?;
        if !Job::has_subcommand(name) {
            return None;
        }
        let command = Job::augment_subcommands(
            clap::Command::new(Self::PROGRAM)
                .no_binary_name(true)
                .subcommand_required(true),
        );
        Some(
            command
                .try_get_matches_from(args)
                .and_then(|m| Job::from_arg_matches(&m)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn every_job_survives_its_own_argv() {
        let serve = CustomServerCmd {
            name: "socat-pipe".into(),
            bind: [127, 0, 0, 1].into(),
            port: 7000,
            command: words("socat TCP-LISTEN:7000,fork,reuseaddr PIPE"),
        };
        for (job, line) in [
            (Job::Hold, "__hold"),
            (
                Job::Signal(SignalJob {
                    target: "echo-server".into(),
                    signal: JobSignal::Kill,
                }),
                "__signal echo-server KILL",
            ),
            (
                Job::Signal(SignalJob {
                    target: "42".into(),
                    signal: JobSignal::Usr1,
                }),
                "__signal 42 USR1",
            ),
            (Job::CpuModel, "__cpu-model"),
            (
                Job::Serve(serve),
                "__serve --name socat-pipe --bind 127.0.0.1 --port 7000 -- socat \
                 TCP-LISTEN:7000,fork,reuseaddr PIPE",
            ),
        ] {
            assert_eq!(job.argv().join(" "), line);
            assert_eq!(Job::parse(&job.argv()).unwrap().unwrap(), job, "{line}");
        }
        assert_eq!(
            Job::CpuModel.command("/usr/local/bin"),
            words("/usr/local/bin/echolab-up __cpu-model")
        );
    }

    #[test]
    fn the_launchers_own_arguments_are_no_job_and_a_jobs_bad_arguments_are_refused() {
        assert!(Job::parse(&words("--profile loopback")).is_none());
        assert!(Job::parse(&[]).is_none());
        let signal = Job::parse(&words("__signal 7 SIGTERM")).unwrap().unwrap();
        assert_eq!(
            signal,
            Job::Signal(SignalJob {
                target: "7".into(),
                signal: JobSignal::Term
            })
        );
        for bad in [
            "__signal 7 HUP",
            "__signal 7",
            "__serve --name x --bind 1.2.3.4 --port 7",
            "__serve --name x --bind 1.2.3.4 --port 70000 -- cat",
            "__serve --name x --port 7 -- cat",
        ] {
            assert!(Job::parse(&words(bad)).unwrap().is_err(), "{bad}");
        }
    }
}
