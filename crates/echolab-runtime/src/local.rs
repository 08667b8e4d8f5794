//! The local backend: no Docker engine reachable, so echo-server and echo-bench run as
//! processes on this machine, over 127.0.0.1 (loopback profile only; docs/architecture.md,
//! "Backends").
//! Every child is killed on drop, so no path leaves one behind.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use echolab_core::cmd::{BenchCmd, Ready, ServerCmd, ServerLaunch};
use echolab_core::results::ResourceSample;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::hosts::{
    cpu_percent, host_mem_bytes, mem_percent, sample_schedule, Hosts, ProcOutput, BENCH_DEADLINE,
    READY_DEADLINE, STOP_DEADLINE,
};

/// Processes from a binary directory (target/release by default).
pub struct LocalHosts {
    bin_dir: PathBuf,
}

/// A running local echo-server.
pub struct LocalServer {
    child: Child,
    pid: u32,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

impl LocalHosts {
    /// Hosts whose binaries are in `bin_dir`.
    ///
    /// # Errors
    /// echo-server or echo-bench is missing, with the command that builds them.
    pub fn new(bin_dir: &Path) -> anyhow::Result<Self> {
        for name in [ServerCmd::PROGRAM, BenchCmd::PROGRAM] {
            let p = bin_dir.join(name);
            if !p.is_file() {
                bail!("{} not found; build it with `cargo build --release --workspace --bins` (or pass --bin-dir)", p.display());
            }
        }
        Ok(Self {
            bin_dir: bin_dir.to_path_buf(),
        })
    }

    /// Starts binary `name` of the binary directory with `args`: stdin empty, stdout and stderr
    /// piped, killed when the handle is dropped.
    ///
    /// # Errors
    /// When the process cannot be started, naming the binary's path.
    fn spawn(&self, name: &str, args: &[String]) -> anyhow::Result<Child> {
        let bin = self.bin_dir.join(name);
        Command::new(&bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))
    }
}

fn drain<R: AsyncRead + Unpin + Send + 'static>(r: R) -> JoinHandle<String> {
    tokio::spawn(async move {
        let mut buf = Vec::new();
        let mut r = r;
        let _ = r.read_to_end(&mut buf).await;
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// `pid` and its descendants, from /proc/PID/task/TID/children (proc(5)): a forking server's
/// workers (prefork, or a custom server such as socat's `fork`) are part of the server.
fn process_tree(pid: u32) -> Vec<u32> {
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", tree[i]));
        for task in tasks.into_iter().flatten().flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            tree.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
        i += 1;
    }
    tree
}

/// Cumulative CPU seconds and resident bytes of `pid` and its descendants ([`process_tree`]):
/// the sum of each process's CPU and resident memory (shared pages counted once per process,
/// as top's RES does).
fn tree_usage(pid: u32) -> Option<(f64, u64)> {
    let mut total = proc_usage(pid)?;
    for child in process_tree(pid).into_iter().skip(1) {
        // A child that exited between the listing and the read is simply gone.
        if let Some((cpu, rss)) = proc_usage(child) {
            total.0 += cpu;
            total.1 += rss;
        }
    }
    Some(total)
}

/// Cumulative CPU seconds and resident bytes of `pid`, from /proc/PID/stat fields 14-17 (utime,
/// stime, cutime, cstime, in clock ticks) and /proc/PID/statm field 2 (resident pages); proc(5).
fn proc_usage(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it follow the last ')'.
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // utime + stime, and cutime + cstime: the CPU of children it has reaped, so that a
    // short-lived child's time stays in the sum after it exits (fields 14-17).
    let ticks: u64 = f
        .get(11..=14)?
        .iter()
        .map(|v| v.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    // SAFETY: sysconf only reads a configuration value; it has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let resident: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some((ticks as f64 / hz, resident * page))
}

impl Hosts for LocalHosts {
    type Server = LocalServer;
    /// Local processes share this machine's loopback: there is no link to read.
    type LinkReading = std::convert::Infallible;

    fn link_counters(
        before: &Self::LinkReading,
        _: &Self::LinkReading,
    ) -> anyhow::Result<echolab_core::results::LinkCounters> {
        crate::hosts::no_link(before)
    }

    async fn fresh_hosts(&mut self) -> anyhow::Result<bool> {
        Ok(false)
    }

    fn server_bind(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    }

    fn target(&self, ready: &Ready) -> SocketAddr {
        ready.addr
    }

    async fn start_server(&mut self, cmd: &ServerLaunch) -> anyhow::Result<(LocalServer, Ready)> {
        let args = cmd.argv();
        let mut child = self.spawn(cmd.program(), &args)?;
        let pid = child
            .id()
            .ok_or_else(|| anyhow!("echo-server exited at once"))?;
        let stdout = drain(child.stdout.take().expect("piped"));
        let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
        let mut seen = String::new();
        let wait_ready = async {
            while let Some(line) = lines.next_line().await? {
                if let Some(r) = Ready::parse(&line) {
                    return Ok(Some(r));
                }
                seen.push_str(&line);
                seen.push('\n');
            }
            Ok::<_, std::io::Error>(None)
        };
        let ready = match tokio::time::timeout(READY_DEADLINE, wait_ready).await {
            Ok(Ok(Some(r))) => r,
            Ok(Ok(None)) => {
                let status = child.wait().await.ok();
                let out = ProcOutput {
                    exit_code: status.and_then(|s| s.code()).map(i64::from),
                    stdout: stdout.await.unwrap_or_default(),
                    stderr: seen,
                    exited_before_stop: false,
                };
                bail!(
                    "echo-server {} exited before it was ready ({})",
                    args.join(" "),
                    out.describe()
                );
            }
            Ok(Err(e)) => bail!("reading echo-server's stderr: {e}"),
            Err(_) => bail!(
                "echo-server {} printed no readiness line within {:?}",
                args.join(" "),
                READY_DEADLINE
            ),
        };
        let rest = tokio::spawn(async move {
            let mut all = seen;
            while let Ok(Some(line)) = lines.next_line().await {
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        Ok((
            LocalServer {
                child,
                pid,
                stdout,
                stderr: rest,
            },
            ready,
        ))
    }

    async fn run_bench(
        &mut self,
        cmd: &BenchCmd,
        server: &LocalServer,
        window_start: Duration,
    ) -> anyhow::Result<(ProcOutput, Vec<ResourceSample>)> {
        let mut child = self.spawn(BenchCmd::PROGRAM, &cmd.argv())?;
        let stdout = drain(child.stdout.take().expect("piped"));
        let stderr = drain(child.stderr.take().expect("piped"));
        let pid = server.pid;
        let total = host_mem_bytes();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // As the Docker sampler: a reading at the start, every SAMPLE_INTERVAL and at the end,
        // one sample per pair of consecutive readings.
        let sampler = tokio::spawn(async move {
            let start = Instant::now();
            let mut samples = Vec::new();
            let mut last = tree_usage(pid).map(|(cpu, _)| (cpu, Instant::now()));
            let mut tick = sample_schedule(window_start);
            tokio::pin!(stopped);
            loop {
                let done = tokio::select! {
                    _ = &mut stopped => true,
                    _ = tick.tick() => false,
                };
                if let Some((cpu, rss)) = tree_usage(pid) {
                    let now = Instant::now();
                    if let Some((cpu0, t0)) = last {
                        samples.push(ResourceSample {
                            t_s: start.elapsed().as_secs_f64(),
                            cpu_pct: cpu_percent(cpu - cpu0, (now - t0).as_secs_f64()),
                            mem_bytes: rss,
                            mem_pct: mem_percent(rss, total),
                            // /proc/PID/stat's utime and stime are in clock ticks (10 ms
                            // at USER_HZ 100): too coarse to split a 1 s window.
                            cpu_user_pct: None,
                            cpu_sys_pct: None,
                        });
                    }
                    last = Some((cpu, now));
                }
                if done {
                    break samples;
                }
            }
        });
        let status = tokio::time::timeout(BENCH_DEADLINE, child.wait()).await;
        let _ = stop.send(());
        let samples_out = sampler.await.unwrap_or_default();
        let status = match status {
            Ok(s) => s.context("waiting for echo-bench")?,
            Err(_) => {
                let _ = child.kill().await;
                bail!(
                    "echo-bench did not finish within {:?}; killed",
                    BENCH_DEADLINE
                );
            }
        };
        let out = ProcOutput {
            exit_code: status.code().map(i64::from),
            stdout: stdout.await?,
            stderr: stderr.await?,
            exited_before_stop: false,
        };
        Ok((out, samples_out))
    }

    async fn trace_bench(&mut self, bench: &BenchCmd) -> anyhow::Result<ProcOutput> {
        let strace = crate::image_archive::on_path("strace")
            .ok_or_else(|| anyhow!("strace is not on this machine's PATH"))?;
        let bin = self.bin_dir.join(BenchCmd::PROGRAM);
        let child = Command::new(&strace)
            .args(crate::hosts::STRACE_ARGS)
            .arg(&bin)
            .args(bench.argv())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", strace.display()))?;
        let out = tokio::time::timeout(BENCH_DEADLINE, child.wait_with_output())
            .await
            .map_err(|_| anyhow!("strace echo-bench did not finish within {BENCH_DEADLINE:?}"))??;
        Ok(ProcOutput {
            exit_code: out.status.code().map(i64::from),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            exited_before_stop: false,
        })
    }

    async fn stop_server(&mut self, mut server: LocalServer) -> anyhow::Result<ProcOutput> {
        if let Some(status) = server.child.try_wait()? {
            return Ok(ProcOutput {
                exit_code: status.code().map(i64::from),
                stdout: server.stdout.await?,
                stderr: server.stderr.await?,
                exited_before_stop: true,
            });
        }
        let pid = nix::unistd::Pid::from_raw(server.pid as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
            .with_context(|| format!("SIGTERM to echo-server pid {}", server.pid))?;
        let status = match tokio::time::timeout(STOP_DEADLINE, server.child.wait()).await {
            Ok(s) => s?,
            Err(_) => {
                let _ = server.child.kill().await;
                bail!(
                    "echo-server pid {} did not exit within {:?} of SIGTERM; killed",
                    server.pid,
                    STOP_DEADLINE
                );
            }
        };
        Ok(ProcOutput {
            exit_code: status.code().map(i64::from),
            stdout: server.stdout.await?,
            stderr: server.stderr.await?,
            exited_before_stop: false,
        })
    }
}
