//! `--processes N`: one run split over N client processes, as distributed load generators
//! split one over several machines.
//!
//! Why processes and not threads: a process may hold at most RLIMIT_NOFILE descriptors, and
//! some machines cap the hard limit (20,000 on the ones this was built on, in containers too),
//! so 50,000 connections need several processes. The parent starts N copies of itself with
//! the same arguments and a hidden `--shard K/N`; shard K runs the contiguous share K of the
//! connections (numbered as in one process, so the open-loop schedule and the source
//! addresses are the same), connects, and prints [`READY_LINE`]. When every shard is ready the
//! parent writes one line to each shard's stdin and they all start; a shard whose parent is
//! gone (stdin closed) stops. The parent then merges the shards' reports ([`merge`]). The
//! contract itself (shard, ready line, merge) is `echolab_core::shard`'s, which the launcher
//! also speaks to the echo-bench of each client machine of a lab run.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use echolab_core::shard::CounterScope;
pub use echolab_core::shard::{parse_shard, Shard, READY_LINE};
use echolab_core::stats::BenchReport;

/// In a shard: tells the parent this shard is ready and blocks until it says go. Exits the
/// process (status 1) when the parent is gone, since nobody would read the result.
pub(crate) fn wait_for_go() {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{READY_LINE}")
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(1);
    }
    drop(out);
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(n) if n > 0 => {}
        _ => {
            eprintln!("echo-bench: shard: the parent process is gone; stopping");
            std::process::exit(1);
        }
    }
}

/// The arguments of a shard: the parent's, without `--processes` and the output flags the
/// parent handles itself, plus `--json --shard K/N`.
pub(crate) fn shard_args(parent: &[String], shard: Shard) -> Vec<String> {
    const DROP_FLAGS: [&str; 4] = ["--json", "--hist", "--syscalls", "--fail-on-error"];
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in parent {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        if a == "--processes" {
            skip_value = true;
        } else if !(a.starts_with("--processes=") || DROP_FLAGS.contains(&a.as_str())) {
            out.push(a.clone());
        }
    }
    out.extend([
        "--json".into(),
        "--shard".into(),
        format!("{}/{}", shard.index, shard.count),
    ]);
    out
}

/// Kills and reaps the shards still running when dropped (an error path).
struct Shards(Vec<Child>);

impl Drop for Shards {
    fn drop(&mut self) {
        crate::interrupt::clear_children();
        for c in &mut self.0 {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

enum Event {
    Ready,
    Done(usize, String),
}

/// Runs `count` shards of this command line and returns their reports, in shard order.
/// `setup_deadline` bounds the wait for all of them to be ready.
///
/// # Errors
/// A shard that cannot start, exits before it is ready or prints no report (its own stderr,
/// which is the parent's, says why), or a setup that takes longer than `setup_deadline`.
pub(crate) fn run_shards(count: u64, setup_deadline: Duration) -> Result<Vec<BenchReport>, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("--processes: cannot find this program: {e}"))?;
    let parent: Vec<String> = std::env::args().skip(1).collect();
    let mut shards = Shards(Vec::new());
    let mut stdins: Vec<ChildStdin> = Vec::new();
    let (tx, rx) = mpsc::channel();
    for index in 0..count {
        let mut child = Command::new(&exe)
            .args(shard_args(&parent, Shard { index, count }))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // A group of its own: a terminal's Ctrl-C reaches only the parent, which forwards
            // each signal once (crate::interrupt), instead of every shard getting it twice.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("--processes: cannot start shard {index}: {e}"))?;
        crate::interrupt::add_child(child.id());
        stdins.push(child.stdin.take().expect("piped"));
        let stdout = child.stdout.take().expect("piped");
        shards.0.push(child);
        let tx = tx.clone();
        let k = index as usize;
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut first = String::new();
            let _ = reader.read_line(&mut first);
            let mut rest = String::new();
            if first.trim_end() == READY_LINE {
                let _ = tx.send(Event::Ready);
            } else {
                rest = first;
            }
            let _ = reader.read_to_string(&mut rest);
            let _ = tx.send(Event::Done(k, rest));
        });
    }
    drop(tx);
    let deadline = std::time::Instant::now() + setup_deadline;
    let mut outputs: Vec<Option<String>> = vec![None; count as usize];
    let mut ready = 0;
    while ready < count {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(Event::Ready) => ready += 1,
            Ok(Event::Done(k, _)) => {
                return Err(format!(
                    "--processes: shard {k} ended before it was ready (its message is above)"
                ))
            }
            Err(_) => {
                return Err(format!(
                    "--processes: {} of {count} shards were not ready within {setup_deadline:?}",
                    count - ready
                ))
            }
        }
    }
    // Every shard is connected and waiting: release them together.
    for s in &mut stdins {
        let _ = s.write_all(b"go\n").and_then(|()| s.flush());
    }
    while let Ok(Event::Done(k, text)) = rx.recv() {
        outputs[k] = Some(text);
    }
    let mut reports = Vec::new();
    for (k, text) in outputs.into_iter().enumerate() {
        let text = text.unwrap_or_default();
        let report = serde_json::from_str::<BenchReport>(&text).map_err(|e| {
            format!("--processes: shard {k} printed no report ({e}); its message is above")
        })?;
        reports.push(report);
    }
    crate::interrupt::clear_children();
    for c in &mut shards.0 {
        let _ = c.wait();
    }
    shards.0.clear();
    Ok(reports)
}

/// One report for the whole run from the shards' reports
/// ([`echolab_core::shard::merge`], the shards reading one network namespace), with this
/// command line, `cpus` (the parent's allowed CPUs, as `BenchReport.cpus` gives them) and
/// the number of processes.
///
/// # Errors
/// No reports, or a histogram that does not decode.
pub(crate) fn merge(parts: Vec<BenchReport>, cpus: String) -> Result<BenchReport, String> {
    let n = parts.len();
    let mut out = echolab_core::shard::merge(parts, CounterScope::OneNamespace)?;
    out.args = std::env::args().skip(1).collect();
    out.threads_reason = format!("{n} processes, each {}", out.threads_reason);
    out.cpus = cpus;
    out.extra.processes = Some(n as u64);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn shard_args_drop_processes_and_output_flags() {
        let parent = strings(&[
            "127.0.0.1",
            "9988",
            "100",
            "--processes",
            "4",
            "--json",
            "--hist",
            "--mode",
            "short",
            "--processes=4",
            "--fail-on-error",
            "--syscalls",
        ]);
        assert_eq!(
            shard_args(&parent, Shard { index: 1, count: 4 }),
            strings(&[
                "127.0.0.1",
                "9988",
                "100",
                "--mode",
                "short",
                "--json",
                "--shard",
                "1/4"
            ])
        );
    }
}
