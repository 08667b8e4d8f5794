//! A second Docker engine on this machine, standing in for a second machine.
//!
//! Tests that need a server and a client on two hosts put the server on the usual engine ("a",
//! `/var/run/docker.sock`) and the client on a [`SecondEngine`] ("b"): a dockerd of its own in a
//! network namespace joined to the root namespace by a veth pair, started and stopped by
//! `scripts/second-engine` (see its header for what it makes and why). Host-network containers
//! of engine b listen at [`SecondEngine::engine_addr`] as seen from the root namespace, and reach
//! engine a's host-network containers (and anything else in the root namespace) at
//! [`SecondEngine::peer_addr`], like two hosts on one link.
//!
//! Engine b starts with no images and there is no registry: load one from engine a, e.g.
//! `docker save IMAGE | docker -H SOCKET load`. Needs root, like the script.
//!
//! [`SecondEngine::start_with_ssh`] also reaches it through ssh ([`SshLogin`]): an sshd of its
//! own beside the engine whose sessions talk to engine b, with a client side that leaves the
//! machine's `~/.ssh` alone.

use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A running second Docker engine; stopped, and everything it made removed, on drop.
///
/// The fields are the `KEY=VALUE` lines `scripts/second-engine up` prints.
pub struct SecondEngine {
    /// Its API over TLS with client certificates, `tcp://ENGINE_ADDR:2376` (`ENDPOINT`).
    pub endpoint: String,
    /// The CA certificate that signed the engine's certificate and the client's (`TLS_CA`).
    pub ca: PathBuf,
    /// The client certificate, for `docker --tlscert` (`TLS_CERT`).
    pub cert: PathBuf,
    /// The client key, for `docker --tlskey` (`TLS_KEY`).
    pub key: PathBuf,
    /// Where the engine's host-network containers are reached from the root namespace
    /// (`ENGINE_ADDR`).
    pub engine_addr: Ipv4Addr,
    /// Where the engine's containers reach the root namespace, and so engine a's host-network
    /// containers (`PEER_ADDR`).
    pub peer_addr: Ipv4Addr,
    /// The network namespace the engine and its host-network containers run in (`NETNS`):
    /// `nsenter --net=/run/netns/NETNS` runs a command beside them.
    pub netns: String,
    /// Its API without TLS, `unix://DIR/docker.sock`, for root (`SOCKET`).
    pub socket: String,
    /// The engine's state directory, removed on drop.
    pub dir: PathBuf,
    /// Its ssh login, from [`SecondEngine::start_with_ssh`]; `None` from
    /// [`SecondEngine::start`].
    pub ssh: Option<SshLogin>,
}

/// Engine b through ssh (`scripts/second-engine up --ssh`): an sshd in its namespace on
/// `ENGINE_ADDR:22` that lets root in with [`SshLogin::identity`] only and gives its sessions
/// `DOCKER_HOST=SOCKET`, so `docker system dial-stdio` there reaches engine b.
#[derive(Debug, Clone, PartialEq)]
pub struct SshLogin {
    /// `ssh://root@ENGINE_ADDR` (`SSH_ENDPOINT`).
    pub endpoint: String,
    /// The client's private key (`SSH_IDENTITY`).
    pub identity: PathBuf,
    /// The client's ssh config, `ssh -F` (`SSH_CONFIG`): the sshd's host key alone as known
    /// host, strict checking, the key, batch mode.
    pub config: PathBuf,
    /// A directory holding an `ssh` that runs the machine's with [`SshLogin::config`]
    /// (`SSH_PATH`), for clients that run `ssh` themselves with no config file of theirs
    /// (bollard through the openssh crate): see [`SshLogin::path_env`].
    pub bin_dir: PathBuf,
}

impl SshLogin {
    /// `PATH` with [`SshLogin::bin_dir`] first, for a process that runs `ssh` from its
    /// `PATH`: its logins then check the sshd's host key against this engine's known_hosts
    /// file, and read and write nothing in `~/.ssh` (where a host key from an earlier engine at
    /// the same address would fail them).
    pub fn path_env(&self) -> OsString {
        let mut dirs = vec![self.bin_dir.clone()];
        dirs.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        std::env::join_paths(dirs).expect("PATH directories without ':'")
    }
}

/// Distinguishes the engines one process starts.
static STARTED: AtomicUsize = AtomicUsize::new(0);

impl SecondEngine {
    /// Starts one with `scripts/second-engine up DIR`, DIR being
    /// `std::env::temp_dir()/echolab-eng-PID-N`, unique per process and call. Takes about half
    /// a second here; dropping it about three (dockerd's own shutdown).
    ///
    /// A DIR of the same name left by an earlier process that had the same pid and died
    /// without dropping its engine is taken down first.
    ///
    /// # Errors
    /// When the script cannot be run or fails (not root, dockerd not ready within 60 s, ...:
    /// the message carries its stderr, with the end of dockerd's log when dockerd was at
    /// fault; the script has then removed what it made), or when its output lacks a key or
    /// has an unparsable line or address (then the engine is taken down before returning).
    pub fn start() -> Result<SecondEngine, String> {
        Self::start_up(false)
    }

    /// As [`SecondEngine::start`], with an sshd beside the engine (`up --ssh`):
    /// [`SecondEngine::ssh`] is set. About half a second more.
    ///
    /// # Errors
    /// As [`SecondEngine::start`]; also when sshd, ssh or ssh-keygen is missing, sshd does not
    /// listen within 10 s, or a login through it does not reach engine b (the message then
    /// has the end of sshd's log).
    pub fn start_with_ssh() -> Result<SecondEngine, String> {
        Self::start_up(true)
    }

    fn start_up(with_ssh: bool) -> Result<SecondEngine, String> {
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("echolab-eng-{}-{n}", std::process::id()));
        if dir.exists() {
            down(&dir)?;
        }
        let script = script();
        let mut up = Command::new(&script);
        up.arg("up");
        if with_ssh {
            up.arg("--ssh");
        }
        let out = up
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "{} up {} failed ({}):\n{}{stdout}",
                script.display(),
                dir.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let parsed = parse_env(&stdout).and_then(|env| match (with_ssh, &env.ssh) {
            (true, None) => Err("no SSH_ENDPOINT= line after up --ssh".to_string()),
            _ => Ok(env),
        });
        match parsed {
            Ok(env) => Ok(SecondEngine {
                endpoint: env.endpoint,
                ca: env.ca,
                cert: env.cert,
                key: env.key,
                engine_addr: env.engine_addr,
                peer_addr: env.peer_addr,
                netns: env.netns,
                socket: env.socket,
                dir,
                ssh: env.ssh,
            }),
            Err(e) => {
                let _ = down(&dir).map_err(|d| eprintln!("{d}"));
                Err(format!("{} up printed {stdout:?}: {e}", script.display()))
            }
        }
    }

    /// A `docker` command aimed at this engine over TLS (`-H ENDPOINT --tlsverify` and the
    /// certificates): add the subcommand and its arguments.
    pub fn docker(&self) -> Command {
        let mut cmd = Command::new("docker");
        // The caller's settings must not redirect it (DOCKER_HOST beside -H is an error).
        for var in [
            "DOCKER_HOST",
            "DOCKER_CONTEXT",
            "DOCKER_TLS_VERIFY",
            "DOCKER_CERT_PATH",
        ] {
            cmd.env_remove(var);
        }
        cmd.arg("-H")
            .arg(&self.endpoint)
            .arg("--tlsverify")
            .arg("--tlscacert")
            .arg(&self.ca)
            .arg("--tlscert")
            .arg(&self.cert)
            .arg("--tlskey")
            .arg(&self.key);
        cmd
    }
}

impl SecondEngine {
    /// The pid of this engine's dockerd: from the pid file dockerd writes in
    /// [`SecondEngine::dir`], checked against its command line (`--data-root DIR/data`), as
    /// the script's `down` does.
    ///
    /// # Errors
    /// No pid file, or its pid is not this engine's dockerd.
    pub fn dockerd_pid(&self) -> Result<i32, String> {
        let file = self.dir.join("dockerd.pid");
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let pid: i32 = text
            .trim()
            .parse()
            .map_err(|e| format!("{}: {text:?}: {e}", file.display()))?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map_err(|e| format!("dockerd pid {pid}: {e}"))?;
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let data_root = format!("--data-root {} ", self.dir.join("data").display());
        if cmdline.contains(&data_root) {
            Ok(pid)
        } else {
            Err(format!("pid {pid} is not this engine's dockerd: {cmdline}"))
        }
    }

    /// Stops this engine's dockerd with SIGSTOP, as a machine or link that dies: it neither
    /// answers nor resets a connection (the kernel still accepts them). Its containers go on.
    /// The returned guard resumes it (SIGCONT) when dropped, also when a test fails.
    ///
    /// # Errors
    /// As [`SecondEngine::dockerd_pid`], or the signal failed.
    pub fn freeze(&self) -> Result<Frozen, String> {
        let pid = self.dockerd_pid()?;
        // SAFETY: kill(2) with a pid just checked to be this engine's dockerd.
        if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
            return Err(format!(
                "SIGSTOP to dockerd {pid}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Frozen { pid })
    }
}

/// A second engine's dockerd stopped by [`SecondEngine::freeze`]; resumed on drop.
#[must_use = "dropping it resumes the engine at once"]
pub struct Frozen {
    pid: i32,
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the dockerd pid freeze() stopped; only a SIGKILL from elsewhere
        // could have ended it meanwhile, and SIGCONT harms no process that took its pid.
        unsafe { libc::kill(self.pid, libc::SIGCONT) };
    }
}

impl Drop for SecondEngine {
    /// `scripts/second-engine down DIR`: removes its containers, stops dockerd, deletes the
    /// namespace, the veth pair and DIR. A failure is printed to stderr, not raised: a drop may
    /// run during a panic, and the script is safe to run again by hand.
    fn drop(&mut self) {
        if let Err(e) = down(&self.dir) {
            eprintln!("{e}");
        }
    }
}

/// `scripts/second-engine`, from this crate's place in the workspace.
fn script() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/second-engine");
    path.canonicalize().unwrap_or(path)
}

/// Runs `scripts/second-engine down dir`; the error carries the script's stderr.
fn down(dir: &Path) -> Result<(), String> {
    let script = script();
    let out = Command::new(&script)
        .arg("down")
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} down {} failed ({}):\n{}",
            script.display(),
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// What `scripts/second-engine up` prints, parsed.
#[derive(Debug, PartialEq)]
struct EnvLines {
    endpoint: String,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    engine_addr: Ipv4Addr,
    peer_addr: Ipv4Addr,
    netns: String,
    socket: String,
    ssh: Option<SshLogin>,
}

/// Parses the script's `KEY=VALUE` lines (the value is everything after the first `=`). Blank
/// lines and keys it does not know are skipped, so the script may add some. The `SSH_` keys
/// come all four or none.
///
/// # Errors
/// A line without `=`, a key given twice, a missing key (named), or an address that is not
/// IPv4.
fn parse_env(text: &str) -> Result<EnvLines, String> {
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("not a KEY=VALUE line: {line:?}"))?;
        if pairs.iter().any(|(k, _)| *k == key) {
            return Err(format!("{key} given twice"));
        }
        pairs.push((key, value));
    }
    let get = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.to_string())
            .ok_or_else(|| format!("no {key}= line"))
    };
    let addr = |key: &str| {
        let value = get(key)?;
        value
            .parse::<Ipv4Addr>()
            .map_err(|e| format!("{key}={value}: not an IPv4 address: {e}"))
    };
    let ssh = if pairs.iter().any(|(k, _)| k.starts_with("SSH_")) {
        Some(SshLogin {
            endpoint: get("SSH_ENDPOINT")?,
            identity: get("SSH_IDENTITY")?.into(),
            config: get("SSH_CONFIG")?.into(),
            bin_dir: get("SSH_PATH")?.into(),
        })
    } else {
        None
    };
    Ok(EnvLines {
        endpoint: get("ENDPOINT")?,
        ca: get("TLS_CA")?.into(),
        cert: get("TLS_CERT")?.into(),
        key: get("TLS_KEY")?.into(),
        engine_addr: addr("ENGINE_ADDR")?,
        peer_addr: addr("PEER_ADDR")?,
        netns: get("NETNS")?,
        socket: get("SOCKET")?,
        ssh,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UP: &str = "ENDPOINT=tcp://10.213.0.2:2376
TLS_CA=/tmp/e/tls/ca.pem
TLS_CERT=/tmp/e/tls/cert.pem
TLS_KEY=/tmp/e/tls/key.pem
ENGINE_ADDR=10.213.0.2
PEER_ADDR=10.213.0.1
NETNS=echolab-eng-9be975
SOCKET=unix:///tmp/e/docker.sock
";

    const SSH: &str = "SSH_ENDPOINT=ssh://root@10.213.0.2
SSH_IDENTITY=/tmp/e/ssh/id_ed25519
SSH_CONFIG=/tmp/e/ssh/config
SSH_PATH=/tmp/e/ssh/bin
";

    #[test]
    fn the_script_output_parses_into_its_fields() {
        assert_eq!(
            parse_env(UP),
            Ok(EnvLines {
                endpoint: "tcp://10.213.0.2:2376".into(),
                ca: "/tmp/e/tls/ca.pem".into(),
                cert: "/tmp/e/tls/cert.pem".into(),
                key: "/tmp/e/tls/key.pem".into(),
                engine_addr: Ipv4Addr::new(10, 213, 0, 2),
                peer_addr: Ipv4Addr::new(10, 213, 0, 1),
                netns: "echolab-eng-9be975".into(),
                socket: "unix:///tmp/e/docker.sock".into(),
                ssh: None,
            })
        );
        // up --ssh: four more lines.
        assert_eq!(
            parse_env(&format!("{UP}{SSH}")).unwrap().ssh,
            Some(SshLogin {
                endpoint: "ssh://root@10.213.0.2".into(),
                identity: "/tmp/e/ssh/id_ed25519".into(),
                config: "/tmp/e/ssh/config".into(),
                bin_dir: "/tmp/e/ssh/bin".into(),
            })
        );
        // Unknown keys and blank lines are skipped; a value may hold `=`.
        let more = format!("\nEXTRA=a=b\n{}", UP.replace("/tmp/e/tls/ca", "/t/x=y"));
        let env = parse_env(&more).unwrap();
        assert_eq!(env.ca, PathBuf::from("/t/x=y.pem"));
    }

    #[test]
    fn a_missing_key_or_bad_line_is_named() {
        let without = |key: &str| {
            UP.lines()
                .filter(|l| !l.starts_with(&format!("{key}=")))
                .collect::<Vec<_>>()
                .join("\n")
        };
        for key in [
            "ENDPOINT",
            "TLS_CA",
            "TLS_CERT",
            "TLS_KEY",
            "ENGINE_ADDR",
            "PEER_ADDR",
            "NETNS",
            "SOCKET",
        ] {
            assert_eq!(
                parse_env(&without(key)),
                Err(format!("no {key}= line")),
                "{key}"
            );
        }
        // The SSH_ keys all four or none.
        for key in ["SSH_ENDPOINT", "SSH_IDENTITY", "SSH_CONFIG", "SSH_PATH"] {
            let some: String = SSH
                .lines()
                .filter(|l| !l.starts_with(&format!("{key}=")))
                .map(|l| format!("{l}\n"))
                .collect();
            assert_eq!(
                parse_env(&format!("{UP}{some}")),
                Err(format!("no {key}= line")),
                "{key}"
            );
        }
        let bad_addr = UP.replace("PEER_ADDR=10.213.0.1", "PEER_ADDR=10.213.0");
        assert!(parse_env(&bad_addr)
            .unwrap_err()
            .starts_with("PEER_ADDR=10.213.0: not an IPv4 address"));
        assert_eq!(
            parse_env(&format!("{UP}starting dockerd\n")),
            Err("not a KEY=VALUE line: \"starting dockerd\"".into())
        );
        assert_eq!(
            parse_env(&format!("{UP}NETNS=other\n")),
            Err("NETNS given twice".into())
        );
    }
}
