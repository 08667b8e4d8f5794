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
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("echolab-eng-{}-{n}", std::process::id()));
        if dir.exists() {
            down(&dir)?;
        }
        let script = script();
        let out = Command::new(&script)
            .arg("up")
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
        match parse_env(&stdout) {
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
}

/// Parses the script's `KEY=VALUE` lines (the value is everything after the first `=`). Blank
/// lines and keys it does not know are skipped, so the script may add some.
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
    Ok(EnvLines {
        endpoint: get("ENDPOINT")?,
        ca: get("TLS_CA")?.into(),
        cert: get("TLS_CERT")?.into(),
        key: get("TLS_KEY")?.into(),
        engine_addr: addr("ENGINE_ADDR")?,
        peer_addr: addr("PEER_ADDR")?,
        netns: get("NETNS")?,
        socket: get("SOCKET")?,
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
