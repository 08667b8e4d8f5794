//! A server that is not an echo-server model: the researcher's own program, run under the
//! launcher's in-image job `echolab-up __serve`, which starts it, checks that it echoes, prints
//! echo-server's readiness line on its behalf and stops it on SIGTERM (echolab-up's
//! `custom_server` module). The runner treats both kinds through [`ServerLaunch`].

use std::fmt;

use super::{Argv, ServerCmd};

/// `echolab-up __serve --name NAME --bind ADDR --port PORT -- COMMAND...`: serve with the
/// researcher's command, which must listen on PORT on every address and answer the echo
/// protocol (`echolab_core::protocol`: every byte read is written back).
///
/// Its clap definition is the job's parser ([`super::Job::Serve`]); [`CustomServerCmd::argv`]
/// writes what it reads.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CustomServerCmd {
    /// The server's name in the experiment, cell ids and the report.
    #[arg(long)]
    pub name: String,
    /// The address the readiness line announces and the echo check connects to (the
    /// backend's server address: 127.0.0.1 for local processes, 0.0.0.0 in a container).
    #[arg(long)]
    pub bind: std::net::IpAddr,
    /// The TCP port the command listens on (it chooses it; the launcher cannot).
    #[arg(long)]
    pub port: u16,
    /// The program and its arguments; the program is looked up on the PATH (in the lab
    /// image, `/usr/local/bin`, where the launcher put it).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl CustomServerCmd {
    /// The program that runs it: the launcher binary, present in every lab image.
    pub const PROGRAM: &'static str = "echolab-up";
    /// The in-image job's name, the launcher's first argument.
    pub const JOB: &'static str = "__serve";

    /// The arguments, without the program name.
    pub fn argv(&self) -> Vec<String> {
        let mut argv = Argv::default();
        argv.arg(Self::JOB)
            .val("name", &self.name)
            .val("bind", self.bind)
            .val("port", self.port)
            .arg("--");
        for a in &self.command {
            argv.arg(a);
        }
        argv.done()
    }
}

/// How the runner starts the server of a cell: an echo-server model, or a custom server under
/// `echolab-up __serve`. Both print [`super::Ready`] when they accept connections and stop on
/// SIGTERM; only echo-server prints stats ([`super::final_stats`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ServerLaunch {
    /// `echo-server --model ...`.
    Model(ServerCmd),
    /// `echolab-up __serve ...`.
    Custom(CustomServerCmd),
}

impl ServerLaunch {
    /// The program to run, by its name in the image's bin directory and the target dir.
    pub fn program(&self) -> &'static str {
        match self {
            ServerLaunch::Model(_) => ServerCmd::PROGRAM,
            ServerLaunch::Custom(_) => CustomServerCmd::PROGRAM,
        }
    }

    /// The arguments, without the program name.
    pub fn argv(&self) -> Vec<String> {
        match self {
            ServerLaunch::Model(c) => c.argv(),
            ServerLaunch::Custom(c) => c.argv(),
        }
    }

    /// Whether the server prints echo-server's stats line when it stops (a custom server
    /// does not: its syscall counters are not measured).
    pub fn prints_stats(&self) -> bool {
        matches!(self, ServerLaunch::Model(_))
    }
}

impl From<ServerCmd> for ServerLaunch {
    fn from(c: ServerCmd) -> Self {
        ServerLaunch::Model(c)
    }
}

impl fmt::Display for ServerLaunch {
    /// The command line, for errors: `echo-server --model epoll-et ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.program(), self.argv().join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::ServerModel;

    #[test]
    fn a_custom_server_runs_under_the_launchers_serve_job() {
        let c = ServerLaunch::Custom(CustomServerCmd {
            name: "socat-pipe".into(),
            bind: [0, 0, 0, 0].into(),
            port: 7000,
            command: vec![
                "socat".into(),
                "TCP-LISTEN:7000,fork,reuseaddr".into(),
                "PIPE".into(),
            ],
        });
        assert_eq!(
            c.to_string(),
            "echolab-up __serve --name socat-pipe --bind 0.0.0.0 --port 7000 -- socat TCP-LISTEN:7000,fork,reuseaddr PIPE"
        );
        assert!(!c.prints_stats());
        let m = ServerLaunch::from(ServerCmd::new(
            ServerModel::EpollEt,
            [127, 0, 0, 1].into(),
            0,
        ));
        assert_eq!(m.program(), "echo-server");
        assert!(m.prints_stats());
    }
}
