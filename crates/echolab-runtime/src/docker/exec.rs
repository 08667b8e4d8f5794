//! Commands run inside a host container (`docker exec`), collected whole or streamed.

use std::time::Duration;

use anyhow::anyhow;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::Docker;
use futures_util::StreamExt as _;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::deadlines::{self, call};
use crate::hosts::ProcOutput;

/// A started exec whose output is being collected.
pub struct Streaming {
    /// Exec id.
    pub exec_id: String,
    /// Fires with the first stderr line that starts with the readiness prefix given to
    /// [`start`] (never, when the program exits first: the sender is then dropped).
    pub ready: oneshot::Receiver<String>,
    /// Ends with (stdout, stderr) when the process's output closes, or with
    /// [`deadlines::NoAnswer`] when the engine stopped answering while the output was silent
    /// ([`deadlines::within`]).
    pub output: JoinHandle<Result<(String, String), deadlines::NoAnswer>>,
    /// Every complete stdout line as it arrives, for a program that reports while it runs
    /// (the wire's counters on SIGUSR1); take it to read them.
    pub stdout_lines: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
}

/// The write end of an exec's stdin ([`start_with_stdin`]).
pub type Stdin = std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// Starts `cmd` in `container` with stdout and stderr attached, watching stderr for a line
/// starting with `ready_prefix`.
///
/// # Errors
/// The exec could not be created or started; the message names the container and command.
pub async fn start(
    docker: &Docker,
    container: &str,
    cmd: &[String],
    ready_prefix: &str,
) -> anyhow::Result<Streaming> {
    Ok(start_attached(docker, container, cmd, ready_prefix, false)
        .await?
        .0)
}

/// [`start`] with stdin attached too (nothing is watched for on stderr): what is written to
/// the returned end reaches the program's stdin. Keep it until the program is done: the
/// engine may close the exec's stdin when it is dropped.
///
/// # Errors
/// As [`start`].
pub async fn start_with_stdin(
    docker: &Docker,
    container: &str,
    cmd: &[String],
) -> anyhow::Result<(Streaming, Stdin)> {
    start_attached(docker, container, cmd, "\0", true).await
}

async fn start_attached(
    docker: &Docker,
    container: &str,
    cmd: &[String],
    ready_prefix: &str,
    stdin: bool,
) -> anyhow::Result<(Streaming, Stdin)> {
    let ready_prefix = ready_prefix.to_string();
    let what = format!("in container {container} ({})", cmd.join(" "));
    let options = CreateExecOptions {
        cmd: Some(cmd.to_vec()),
        attach_stdin: Some(stdin),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        ..Default::default()
    };
    let created = call(
        docker,
        "create exec",
        &what,
        docker.create_exec(container, options),
    )
    .await?;
    let started = call(
        docker,
        "start exec",
        &what,
        docker.start_exec(&created.id, None),
    )
    .await?;
    let StartExecResults::Attached { mut output, input } = started else {
        return Err(anyhow!(
            "docker: start exec {what}: engine detached the exec"
        ));
    };
    let (tx, ready) = oneshot::channel();
    let (line_tx, stdout_lines) = tokio::sync::mpsc::unbounded_channel();
    let engine = docker.clone();
    let output = tokio::spawn(async move {
        let (mut out, mut err) = (Vec::<u8>::new(), Vec::<u8>::new());
        let mut tx = Some(tx);
        let (mut scanned, mut scanned_out) = (0, 0);
        // A program may be silent for as long as it runs (its caller bounds that); the engine
        // must go on answering meanwhile.
        loop {
            let chunk = match deadlines::within(&engine, Duration::MAX, output.next()).await {
                Ok(Some(Ok(chunk))) => chunk,
                Ok(_) => break,
                Err(_) => return Err(deadlines::NoAnswer),
            };
            match chunk {
                LogOutput::StdOut { message } => {
                    out.extend_from_slice(&message);
                    while let Some(nl) = out[scanned_out..].iter().position(|b| *b == b'\n') {
                        let line = String::from_utf8_lossy(&out[scanned_out..scanned_out + nl]);
                        // Nobody listening is fine: most programs are only read at the end.
                        let _ = line_tx.send(line.into_owned());
                        scanned_out += nl + 1;
                    }
                }
                LogOutput::StdErr { message } => {
                    err.extend_from_slice(&message);
                    // Look at complete lines only: a line may arrive in several chunks.
                    while let Some(nl) = err[scanned..].iter().position(|b| *b == b'\n') {
                        let line =
                            String::from_utf8_lossy(&err[scanned..scanned + nl]).into_owned();
                        scanned += nl + 1;
                        if line.starts_with(&ready_prefix) {
                            if let Some(tx) = tx.take() {
                                let _ = tx.send(line);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok((
            String::from_utf8_lossy(&out).into_owned(),
            String::from_utf8_lossy(&err).into_owned(),
        ))
    });
    let streaming = Streaming {
        exec_id: created.id,
        ready,
        output,
        stdout_lines: Some(stdout_lines),
    };
    Ok((streaming, input))
}

/// Waits for a streaming exec's output to close (at most `deadline`) and returns it with the
/// exit code.
///
/// # Errors
/// The deadline passed (the process is still running) or the engine failed.
pub async fn finish(
    docker: &Docker,
    s: Streaming,
    deadline: Duration,
) -> anyhow::Result<ProcOutput> {
    let (stdout, stderr) = tokio::time::timeout(deadline, s.output)
        .await
        .map_err(|_| anyhow!("still running after {deadline:?}"))?
        .map_err(|e| anyhow!("output reader failed: {e}"))?
        .map_err(|silent| anyhow::Error::new(silent).context("docker: reading the output"))?;
    // The output closes a moment before the engine records the exit code; poll until it has.
    let mut code = None;
    let poll_until = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < poll_until {
        let info = call(
            docker,
            "inspect exec",
            &s.exec_id,
            docker.inspect_exec(&s.exec_id),
        )
        .await?;
        if info.running != Some(true) {
            code = info.exit_code;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(ProcOutput {
        exit_code: code,
        stdout,
        stderr,
        exited_before_stop: false,
    })
}

/// Runs `cmd` in `container` to completion (at most `deadline`).
///
/// # Errors
/// As [`start`] and [`finish`].
pub async fn run(
    docker: &Docker,
    container: &str,
    cmd: &[String],
    deadline: Duration,
) -> anyhow::Result<ProcOutput> {
    // No line starts with a NUL: nothing is waited for.
    let s = start(docker, container, cmd, "\0").await?;
    finish(docker, s, deadline)
        .await
        .map_err(|e| e.context(format!("{} in container {container}", cmd.join(" "))))
}
