//! `echolab-up __serve --name NAME --bind ADDR --port PORT -- COMMAND...`: the in-image job
//! that runs a researcher's own server (an experiment's `servers: [{name, command, port}]`)
//! so that the runner can treat it as it treats echo-server
//! (`echolab_core::cmd::ServerLaunch`):
//!
//! 1. starts COMMAND in a process group of its own, its stdout joined to this job's stderr
//!    (stdout is where echo-server's stats go, and a custom server has none);
//! 2. waits until PORT accepts a connection, then checks that the server echoes: the
//!    protocol's request (`echolab_core::protocol::DEFAULT_PAYLOAD`) must come back unchanged;
//! 3. prints echo-server's readiness line (`echolab_core::cmd::Ready`) with this job's pid,
//!    which is the pid the backends signal;
//! 4. on SIGTERM or SIGINT stops the whole group (SIGTERM, then SIGKILL after
//!    [`STOP_GRACE`]) and exits 0; if the server exits first, prints echo-server's fatal line
//!    (`echolab_core::cmd::Fatal`) with its status and exits 1.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use echolab_core::cmd::{CustomServerCmd, Fatal, Ready};
use echolab_core::protocol::DEFAULT_PAYLOAD;
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;

/// How long the server may take to accept its first connection: below the launcher's
/// readiness deadline (`hosts::READY_DEADLINE`, 30 s), so that this job's reason, not the
/// launcher's timeout, is what the run records.
pub const LISTEN_DEADLINE: Duration = Duration::from_secs(20);
/// How long the echo check waits for the reply.
pub const ECHO_DEADLINE: Duration = Duration::from_secs(5);
/// How long the server's group has between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// Between two connection attempts while the server is not yet listening.
const RETRY: Duration = Duration::from_millis(20);

/// Runs `__serve` (its arguments parsed by the launcher binary with core's clap definition,
/// `echolab_core::cmd::Job::Serve`); returns the exit code: 0 after SIGTERM/SIGINT, 1 after a
/// fatal line.
pub fn serve(a: &CustomServerCmd) -> i32 {
    match run(a) {
        Ok(code) => code,
        Err(reason) => {
            eprintln!("{}", Fatal::new(&format!("server {:?}: {reason}", a.name)));
            1
        }
    }
}

fn run(a: &CustomServerCmd) -> Result<i32, String> {
    let mut signals = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD] {
        signals.add(s);
    }
    // Blocked before the server exists so that no signal is lost in between; the server
    // itself gets an empty mask (below), as if started by a shell.
    signals
        .thread_block()
        .map_err(|e| format!("cannot block signals: {e}"))?;
    let stdout_to_stderr = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| format!("cannot duplicate stderr: {e}"))?;
    let mut cmd = Command::new(&a.command[0]);
    cmd.args(&a.command[1..])
        .stdin(Stdio::null())
        .stdout(stdout_to_stderr)
        .process_group(0);
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // sigprocmask(2), which is async-signal-safe (signal-safety(7)).
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", a.command[0]))?;
    let addr = SocketAddr::new(a.bind, a.port);
    if let Err(reason) = wait_until_it_echoes(&mut child, addr) {
        stop_group(&mut child);
        return Err(reason);
    }
    let ready = Ready {
        addr,
        model: a.name.clone(),
        workers: 1,
        pid: std::process::id(),
    };
    eprintln!("{ready}");
    loop {
        match signals.wait() {
            Ok(Signal::SIGCHLD) => {
                if let Ok(Some(status)) = child.try_wait() {
                    stop_group(&mut child);
                    return Err(format!("exited while serving ({status})"));
                }
            }
            Ok(_) => {
                stop_group(&mut child);
                return Ok(0);
            }
            Err(e) => {
                stop_group(&mut child);
                return Err(format!("sigwait: {e}"));
            }
        }
    }
}

/// Connects until the server accepts (or exits, or [`LISTEN_DEADLINE`] passes), then sends the
/// protocol's request and reads it back.
fn wait_until_it_echoes(child: &mut Child, addr: SocketAddr) -> Result<(), String> {
    let target = if addr.ip().is_unspecified() {
        SocketAddr::new(IpAddr::from([127, 0, 0, 1]), addr.port())
    } else {
        addr
    };
    let started = Instant::now();
    let mut stream = loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "exited before it listened on port {} ({status})",
                addr.port()
            ));
        }
        match TcpStream::connect_timeout(&target, Duration::from_secs(1)) {
            Ok(s) => break s,
            Err(e) if started.elapsed() >= LISTEN_DEADLINE => {
                return Err(format!(
                    "did not accept a connection on {target} within {LISTEN_DEADLINE:?} ({e}); \
                     does its command listen on port {}?",
                    addr.port()
                ));
            }
            Err(_) => std::thread::sleep(RETRY),
        }
    };
    let mut check = || -> std::io::Result<Vec<u8>> {
        stream.set_read_timeout(Some(ECHO_DEADLINE))?;
        stream.write_all(DEFAULT_PAYLOAD)?;
        let mut got = vec![0u8; DEFAULT_PAYLOAD.len()];
        let mut n = 0;
        while n < got.len() {
            match stream.read(&mut got[n..])? {
                0 => break,
                k => n += k,
            }
        }
        got.truncate(n);
        Ok(got)
    };
    match check() {
        Ok(got) if got == DEFAULT_PAYLOAD => Ok(()),
        Ok(got) => Err(format!(
            "does not echo: sent {:?}, got {:?} back",
            String::from_utf8_lossy(DEFAULT_PAYLOAD),
            String::from_utf8_lossy(&got)
        )),
        Err(e) => Err(format!(
            "does not echo: sent {:?} to {target}, and reading the reply failed: {e}",
            String::from_utf8_lossy(DEFAULT_PAYLOAD)
        )),
    }
}

/// SIGTERM to the server's process group (a forking server's children too), SIGKILL after
/// [`STOP_GRACE`], and the server reaped.
fn stop_group(child: &mut Child) {
    let group = Pid::from_raw(-(child.id() as i32));
    let _ = kill(group, Signal::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(RETRY);
    }
    // Whatever is left of the group (the server, or children it forked) goes now.
    let _ = kill(group, Signal::SIGKILL);
    let _ = child.wait();
}
