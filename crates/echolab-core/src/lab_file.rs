//! The lab file (`--lab lab.yaml`): the Docker engines of a multi-machine run and which role
//! runs on which. Read and checked before anything is created on any engine:
//! unknown keys, a role naming no engine, a TLS file that is not there and an endpoint of an
//! unknown kind are one-line errors naming the file and the field.
//!
//! ```yaml
//! engines:
//!   a: { endpoint: "unix:///var/run/docker.sock", address: 10.0.0.1 }
//!   b: { endpoint: "tcp://10.0.0.2:2376", tls: { ca: ca.pem, cert: cert.pem, key: key.pem } }
//!   c: { endpoint: "ssh://lab@10.0.0.3" }
//! roles: { server: a, client: b }      # or client: [b, c], several client machines
//! ```
//!
//! Relative TLS and identity paths are relative to the lab file's directory. `address` is
//! where the other machines reach this machine's host-network containers; it defaults to the
//! endpoint's host when that is an IP address (`tcp://`, `ssh://`), and the server's engine
//! needs one.
//!
//! Several client machines (`client: [b, c]`) split each short/long run's connections
//! between them (`crate::shard`), start together and merge into one run record, as
//! distributed load generators do when one client machine cannot saturate the server. On a
//! link profile each client machine gets its own link host: the profile applies to each
//! path (its delay, jitter and loss as on separate real paths, its rate per path), which the
//! manifest's link record says.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// A lab file, read and checked ([`Lab::load`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Lab {
    /// The file it came from.
    pub path: PathBuf,
    /// The engines by name, with resolved paths and addresses.
    pub engines: BTreeMap<String, EngineSpec>,
    /// The engine of the server role.
    pub server: String,
    /// The engines of the client role, in the file's order: one, or several machines that
    /// split the load.
    pub clients: Vec<String>,
}

/// How to reach one engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `unix:///path/to/docker.sock`: an engine on the launcher's machine.
    Unix(PathBuf),
    /// `tcp://host:port` with mutual TLS (dockerd `--tlsverify`): the files are the CA that
    /// signed the engine's certificate, and the client's certificate and key.
    Tls {
        /// `host:port`.
        addr: String,
        /// CA certificate (PEM).
        ca: PathBuf,
        /// Client certificate (PEM).
        cert: PathBuf,
        /// Client key (PEM).
        key: PathBuf,
    },
    /// `ssh://user@host[:port]`: the engine's socket through `ssh` (the machine's ssh
    /// client and agent, or `identity`).
    Ssh {
        /// The whole `ssh://` URL.
        url: String,
        /// A private key file, if not the agent's or ssh's default.
        identity: Option<PathBuf>,
    },
}

/// One engine of the lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSpec {
    /// The endpoint as written.
    pub endpoint_text: String,
    /// How to reach it.
    pub endpoint: Endpoint,
    /// Where the other machines reach this machine's host-network containers.
    pub address: Option<IpAddr>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LabText {
    engines: BTreeMap<String, EngineText>,
    roles: RolesText,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EngineText {
    endpoint: String,
    #[serde(default)]
    tls: Option<TlsText>,
    #[serde(default)]
    identity: Option<PathBuf>,
    #[serde(default)]
    address: Option<IpAddr>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsText {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RolesText {
    server: String,
    /// `b` or `[b, c]` ([`client_engines`]).
    client: serde_yaml::Value,
    #[serde(default)]
    link: Option<String>,
}

impl Lab {
    /// Reads and checks the lab file at `path`.
    ///
    /// # Errors
    /// One line naming the file and the field: unreadable, not YAML of this shape (unknown
    /// keys included), or a check of [`Lab::from_yaml`].
    pub fn load(path: &Path) -> Result<Lab, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("lab file {}: cannot read: {e}", path.display()))?;
        Lab::from_yaml(&text, path)
    }

    /// Parses and checks lab text as if read from `path` (relative files are resolved
    /// against its directory, and must exist).
    ///
    /// # Errors
    /// See [`Lab::load`]: besides the shape, a role naming an engine the file does not
    /// define, server and client on one engine, a `link` role (not built yet), an endpoint
    /// that is not `unix://`, `tcp://` or `ssh://`, `tcp://` without `tls`, `tls` or
    /// `identity` on the wrong kind of endpoint, a missing TLS or identity file, or a server
    /// engine with no address.
    pub fn from_yaml(text: &str, path: &Path) -> Result<Lab, String> {
        let fail = |m: String| format!("lab file {}: {m}", path.display());
        let raw: LabText = serde_yaml::from_str(text).map_err(|e| fail(e.to_string()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut engines = BTreeMap::new();
        for (name, e) in raw.engines {
            let spec = engine_spec(&name, e, dir).map_err(&fail)?;
            engines.insert(name, spec);
        }
        let roles = raw.roles;
        let clients = client_engines(roles.client).map_err(&fail)?;
        if clients.is_empty() {
            return Err(fail(
                "roles.client: the list is empty; name the engine (or engines) the client runs on"
                    .into(),
            ));
        }
        for (i, c) in clients.iter().enumerate() {
            if clients[..i].contains(c) {
                return Err(fail(format!(
                    "roles.client: engine {c:?} is listed twice; each client machine takes one share of the connections"
                )));
            }
        }
        let named =
            std::iter::once(("server", &roles.server)).chain(clients.iter().map(|c| ("client", c)));
        for (role, engine) in named {
            if !engines.contains_key(engine) {
                return Err(fail(format!(
                    "roles.{role}: no engine named {engine:?} (engines: {})",
                    engines.keys().cloned().collect::<Vec<_>>().join(", ")
                )));
            }
        }
        if let Some(link) = roles.link {
            return Err(fail(format!(
                "roles.link: {link:?}: a link host on a third engine is not built; leave roles.link out: a link profile (lan100, crossnet) runs its link host on the client's machine"
            )));
        }
        if clients.contains(&roles.server) {
            return Err(fail(format!(
                "roles: server and client are both on engine {:?}; a lab puts them on separate machines (for one machine, run without --lab)",
                roles.server
            )));
        }
        if engines[&roles.server].address.is_none() {
            return Err(fail(format!(
                "engines.{}.address: the server's engine needs the address the client's machine reaches it at (its endpoint {} names none)",
                roles.server, engines[&roles.server].endpoint_text
            )));
        }
        Ok(Lab {
            path: path.to_path_buf(),
            engines,
            server: roles.server,
            clients,
        })
    }

    /// Reads the lab file at `path` for a run on `profile`, before any engine is contacted:
    /// a lab runs profile `native` (the real path) or a link profile (its link on the
    /// client's machine, on top of the real path), not a loopback one, and only on Docker
    /// engines (`local` is `--backend local`).
    ///
    /// # Errors
    /// As [`Lab::load`], or a wrong profile or backend, in one line.
    pub fn for_run(
        path: &Path,
        profile: &crate::profile::Profile,
        local: bool,
    ) -> Result<Lab, String> {
        use crate::profile::Topology;
        let lab = Lab::load(path)?;
        if local {
            return Err(
                "--lab runs on the lab file's Docker engines; it cannot take --backend local"
                    .into(),
            );
        }
        if profile.topology == Topology::Loopback {
            return Err(format!(
                "--lab {}: profile {} is loopback, one machine's; across machines use profile native (the real path, measured, nothing added) or a link profile such as lan100 (added on top of it)",
                path.display(),
                profile.name,
            ));
        }
        let server = lab.server_address();
        if profile.topology == Topology::Link && server.is_ipv6() {
            // The link across machines is IPv4: the userspace wire's policy rules and the
            // masquerade are, so IPv6 would pass the link host unimpaired (kernel netem
            // would impair it, but which backend runs is known only in the link host).
            return Err(format!(
                "--lab {}: engines.{}.address: {server} is IPv6, and profile {}'s link across machines carries IPv4 only (IPv6 would pass it unimpaired); give the server's engine an IPv4 address",
                path.display(),
                lab.server,
                profile.name,
            ));
        }
        Ok(lab)
    }

    /// Whether `exp` can run split over this lab's client machines: with several, every cell
    /// must be a short/long run (echo-bench splits only those) with at least one connection
    /// per machine, and the experiment must not ask for strace (one machine's share would
    /// be traced alone). One client machine runs anything.
    ///
    /// # Errors
    /// The first cell or key that cannot, in one line naming it.
    pub fn check_experiment(&self, exp: &crate::experiment::Experiment) -> Result<(), String> {
        use crate::experiment::BenchMode;
        let n = self.clients.len() as u64;
        if n == 1 {
            return Ok(());
        }
        let why = |m: String| {
            format!(
                "lab file {}: roles.client lists {n} engines, and experiment {}: {m}",
                self.path.display(),
                exp.name
            )
        };
        if exp.bench.strace {
            return Err(why(
                "bench.strace: true traces one client process; run it with one client machine"
                    .into(),
            ));
        }
        for cell in exp.cells() {
            if !matches!(cell.mode, BenchMode::Short | BenchMode::Long) {
                return Err(why(format!(
                    "cell {} is a {} run, which is not split over machines (short and long runs are); run it with one client machine",
                    cell.id(),
                    cell.mode.name()
                )));
            }
            if cell.conns < n {
                return Err(why(format!(
                    "cell {} has {} connections, fewer than one per client machine",
                    cell.id(),
                    cell.conns
                )));
            }
        }
        Ok(())
    }

    /// The engines no role names: a run does not contact them (`--down --lab` does).
    pub fn unused(&self) -> Vec<&str> {
        self.engines
            .keys()
            .map(String::as_str)
            .filter(|n| *n != self.server && !self.clients.iter().any(|c| c == n))
            .collect()
    }

    /// The first client engine: the one whose path calibration names first.
    pub fn client(&self) -> &str {
        &self.clients[0]
    }

    /// The server engine's address (checked present by [`Lab::from_yaml`]).
    pub fn server_address(&self) -> IpAddr {
        self.engines[&self.server]
            .address
            .expect("Lab::from_yaml refuses a server engine without an address")
    }
}

/// The engine names of `roles.client`: one name, or a list of names.
///
/// # Errors
/// Anything else, naming the field and what it found.
fn client_engines(value: serde_yaml::Value) -> Result<Vec<String>, String> {
    use serde_yaml::Value;
    let shape = "an engine name (client: b) or a list of them (client: [b, c])";
    match value {
        Value::String(name) => Ok(vec![name]),
        Value::Sequence(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(name) => Ok(name),
                other => Err(format!(
                    "roles.client[{i}]: {} is not an engine name",
                    yaml_text(&other)
                )),
            })
            .collect(),
        other => Err(format!(
            "roles.client: {} is not {shape}",
            yaml_text(&other)
        )),
    }
}

/// `value` as it would be written in YAML, on one line.
fn yaml_text(value: &serde_yaml::Value) -> String {
    serde_yaml::to_string(value)
        .map(|t| t.trim().replace('\n', " "))
        .unwrap_or_else(|_| format!("{value:?}"))
}

fn engine_spec(name: &str, e: EngineText, dir: &Path) -> Result<EngineSpec, String> {
    let field = |f: &str| format!("engines.{name}.{f}");
    let existing = |f: &str, p: &Path| -> Result<PathBuf, String> {
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            dir.join(p)
        };
        if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{}: {} is not a file", field(f), p.display()))
        }
    };
    let text = e.endpoint.clone();
    let (endpoint, host) = if let Some(path) = text.strip_prefix("unix://") {
        (Endpoint::Unix(PathBuf::from(path)), None)
    } else if let Some(addr) = text.strip_prefix("tcp://") {
        let Some(tls) = &e.tls else {
            return Err(format!(
                "{}: {text} needs tls: {{ ca, cert, key }} (an engine's TCP API without TLS gives root on that machine to anyone who reaches it)",
                field("tls")
            ));
        };
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        // What each file holds is checked here, where the field can be named: a swapped cert
        // and key otherwise fail deep in the TLS handshake ("connection was not ready").
        let pem = |f: &str, p: &Path, is_label: fn(&str) -> bool| -> Result<PathBuf, String> {
            let p = existing(f, p)?;
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let found = text
                .lines()
                .filter_map(|l| l.strip_prefix("-----BEGIN ")?.strip_suffix("-----"))
                .any(is_label);
            if found {
                Ok(p)
            } else {
                Err(format!(
                    "{}: {} holds no PEM block of that kind",
                    field(f),
                    p.display()
                ))
            }
        };
        let certificate = |label: &str| label == "CERTIFICATE";
        let private_key = |label: &str| label.ends_with("PRIVATE KEY");
        let endpoint = Endpoint::Tls {
            addr: addr.to_string(),
            ca: pem("tls.ca", &tls.ca, certificate)?,
            cert: pem("tls.cert", &tls.cert, certificate)?,
            key: pem("tls.key", &tls.key, private_key)?,
        };
        (endpoint, Some(host.to_string()))
    } else if let Some(rest) = text.strip_prefix("ssh://") {
        let host_port = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        let host = host_port.rsplit_once(':').map_or(host_port, |(h, _)| h);
        let identity = match &e.identity {
            Some(p) => Some(existing("identity", p)?),
            None => None,
        };
        let endpoint = Endpoint::Ssh {
            url: text.clone(),
            identity,
        };
        (endpoint, Some(host.to_string()))
    } else {
        return Err(format!(
            "{}: {text:?} is not unix://PATH, tcp://HOST:PORT or ssh://USER@HOST",
            field("endpoint")
        ));
    };
    if e.tls.is_some() && !matches!(endpoint, Endpoint::Tls { .. }) {
        return Err(format!(
            "{}: only a tcp:// endpoint takes tls",
            field("tls")
        ));
    }
    if e.identity.is_some() && !matches!(endpoint, Endpoint::Ssh { .. }) {
        return Err(format!(
            "{}: only an ssh:// endpoint takes an identity",
            field("identity")
        ));
    }
    let address = e.address.or_else(|| {
        host.as_deref()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
            .and_then(|h| h.parse().ok())
    });
    Ok(EngineSpec {
        endpoint_text: text,
        endpoint,
        address,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lab file in a fresh directory with TLS files, so that relative paths resolve.
    fn lab(text: &str) -> Result<Lab, String> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("echolab-lab-test-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = "-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n";
        let key = "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n";
        for (f, text) in [
            ("ca.pem", cert),
            ("cert.pem", cert),
            ("key.pem", key),
            ("id_ed25519", "x"),
        ] {
            std::fs::write(dir.join(f), text).unwrap();
        }
        let r = Lab::from_yaml(text, &dir.join("lab.yaml"));
        std::fs::remove_dir_all(&dir).unwrap();
        r
    }

    const TWO: &str = "engines:\n  a: { endpoint: \"unix:///var/run/docker.sock\", address: 10.0.0.1 }\n  b: { endpoint: \"tcp://10.0.0.2:2376\", tls: { ca: ca.pem, cert: cert.pem, key: key.pem } }\nroles: { server: a, client: b }\n";

    #[test]
    fn a_two_engine_lab_resolves_files_and_addresses() {
        let l = lab(TWO).unwrap();
        assert_eq!((l.server.as_str(), l.client()), ("a", "b"));
        assert_eq!(l.clients, ["b"]);
        assert!(l.unused().is_empty());
        assert_eq!(l.server_address(), "10.0.0.1".parse::<IpAddr>().unwrap());
        let b = &l.engines["b"];
        assert_eq!(
            b.address,
            Some("10.0.0.2".parse().unwrap()),
            "from the endpoint"
        );
        let Endpoint::Tls { addr, ca, .. } = &b.endpoint else {
            panic!("{b:?}")
        };
        assert_eq!(addr, "10.0.0.2:2376");
        assert_eq!(
            ca,
            &l.path.with_file_name("ca.pem"),
            "relative to the lab file"
        );
        assert_eq!(
            l.engines["a"].endpoint,
            Endpoint::Unix("/var/run/docker.sock".into())
        );
        let ssh = TWO.replace(
            "b: { endpoint: \"tcp://10.0.0.2:2376\", tls: { ca: ca.pem, cert: cert.pem, key: key.pem } }",
            "b: { endpoint: \"ssh://lab@10.0.0.3:2222\", identity: id_ed25519 }",
        );
        let l = lab(&ssh).unwrap();
        let three = ssh.replace(
            "roles:",
            "  c: { endpoint: \"unix:///run/other.sock\" }\nroles:",
        );
        assert_eq!(lab(&three).unwrap().unused(), ["c"]);
        assert_eq!(l.engines["b"].address, Some("10.0.0.3".parse().unwrap()));
        assert!(
            matches!(&l.engines["b"].endpoint, Endpoint::Ssh { url, identity: Some(_) } if url == "ssh://lab@10.0.0.3:2222")
        );
    }

    #[test]
    fn a_lab_runs_native_and_link_profiles_on_docker_only() {
        let dir = std::env::temp_dir().join(format!("echolab-lab-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lab.yaml");
        std::fs::write(
            &path,
            TWO.replace(", tls: { ca: ca.pem, cert: cert.pem, key: key.pem }", "")
                .replace("tcp://10.0.0.2:2376", "ssh://lab@10.0.0.2"),
        )
        .unwrap();
        let profile = |topology: &str| {
            let delays = if topology == "link" {
                "uplink: { delay: 1ms }\ndownlink: { delay: 1ms }\n"
            } else {
                ""
            };
            let text = format!("name: p\ndescription: d\nsource: s\ntopology: {topology}\n{delays}expected:\n  rtt: {{ value: 0s, minus: 0s, plus: 5ms }}\n");
            crate::profile::Profile::from_yaml(&text, "p.yaml").unwrap()
        };
        let native = profile("native");
        assert_eq!(Lab::for_run(&path, &native, false).unwrap().clients, ["b"]);
        assert_eq!(
            Lab::for_run(&path, &profile("link"), false).unwrap().server,
            "a"
        );
        // Two client machines, on either kind of profile (a link profile gets a link per path).
        let two = std::fs::read_to_string(&path).unwrap().replace(
            "roles:",
            "  c: { endpoint: \"ssh://lab@10.0.0.3\" }\nroles:",
        );
        std::fs::write(&path, two.replace("client: b", "client: [c, b]")).unwrap();
        assert_eq!(
            Lab::for_run(&path, &native, false).unwrap().clients,
            ["c", "b"]
        );
        assert_eq!(
            Lab::for_run(&path, &profile("link"), false)
                .unwrap()
                .clients,
            ["c", "b"]
        );
        // A server reached over IPv6 is refused on a link profile, which would not impair it,
        // and taken on the native one, which impairs nothing.
        std::fs::write(
            &path,
            two.replace("address: 10.0.0.1", "address: \"fd00::1\""),
        )
        .unwrap();
        let e = Lab::for_run(&path, &profile("link"), false).unwrap_err();
        assert!(
            e.ends_with("engines.a.address: fd00::1 is IPv6, and profile p's link across machines carries IPv4 only (IPv6 would pass it unimpaired); give the server's engine an IPv4 address")
                && !e.contains('\n'),
            "{e}"
        );
        assert!(Lab::for_run(&path, &native, false).is_ok());
        std::fs::write(&path, two).unwrap();
        let e = Lab::for_run(&path, &native, true).unwrap_err();
        assert!(e.contains("--backend local"), "{e}");
        let e = Lab::for_run(&path, &profile("loopback"), false).unwrap_err();
        assert!(
            e.contains("profile p is loopback") && e.contains("native"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn several_client_machines_take_short_and_long_cells_only() {
        let three = TWO.replace(
            "roles: { server: a, client: b }",
            "  c: { endpoint: \"ssh://lab@10.0.0.3\" }\nroles: { server: a, client: [b, c] }",
        );
        let l = lab(&three).unwrap();
        let exp = |matrix: &str, extra: &str| {
            crate::experiment::Experiment::parse(
                &format!("name: e\nquestion: q\nrepetitions: 1\n{extra}matrix:\n  - {matrix}\n"),
                "e.yaml",
            )
            .unwrap()
        };
        let short_long =
            "{ servers: [epoll-et], modes: [short, long], conns: [2, 100], rounds: [10] }";
        assert_eq!(l.check_experiment(&exp(short_long, "")), Ok(()));
        let e = l
            .check_experiment(&exp(
                "{ servers: [epoll-et], modes: [long], conns: [1], rounds: [10] }",
                "",
            ))
            .unwrap_err();
        assert!(
            e.contains("1 connections, fewer than one per client machine"),
            "{e}"
        );
        let e = l
            .check_experiment(&exp(short_long, "bench:\n  strace: true\n"))
            .unwrap_err();
        assert!(e.contains("strace"), "{e}");
        let storm = "{ servers: [epoll-et], modes: [connect-storm], conns: [100] }";
        let e = l.check_experiment(&exp(storm, "")).unwrap_err();
        assert!(
            e.contains("connect-storm run") && e.contains("lab.yaml"),
            "{e}"
        );
        // One client machine runs anything.
        assert_eq!(
            lab(TWO)
                .unwrap()
                .check_experiment(&exp(storm, "bench:\n  strace: true\n")),
            Ok(())
        );
    }

    #[test]
    fn every_mistake_names_its_field() {
        let cases = [
            (
                TWO.replace("address: 10.0.0.1", "adress: 10.0.0.1"),
                "adress",
            ),
            (TWO.replace("client: b", "client: c"), "roles.client"),
            (TWO.replace("client: b", "client: a"), "separate machines"),
            (
                TWO.replace("client: b", "client: [b, a]"),
                "separate machines",
            ),
            (TWO.replace("client: b", "client: [b, c]"), "roles.client"),
            (TWO.replace("client: b", "client: [b, b]"), "listed twice"),
            (
                TWO.replace("client: b", "client: []"),
                "roles.client: the list is empty",
            ),
            (
                TWO.replace("client: b", "client: 5"),
                "roles.client: 5 is not an engine name (client: b) or a list",
            ),
            (
                TWO.replace("client: b", "client: [b, 3]"),
                "roles.client[1]: 3 is not an engine name",
            ),
            (
                TWO.replace("client: b", "client: { x: y }"),
                "roles.client: x: y is not",
            ),
            (
                TWO.replace(
                    "{ server: a, client: b }",
                    "{ server: a, client: b, link: b }",
                ),
                "roles.link",
            ),
            (
                TWO.replace("ca: ca.pem", "ca: nope.pem"),
                "engines.b.tls.ca",
            ),
            (
                TWO.replace(
                    "cert: cert.pem, key: key.pem",
                    "cert: key.pem, key: cert.pem",
                ),
                "engines.b.tls.cert: ",
            ),
            (
                TWO.replace("key: key.pem", "key: ca.pem"),
                "engines.b.tls.key: ",
            ),
            (
                TWO.replace(", tls: { ca: ca.pem, cert: cert.pem, key: key.pem }", ""),
                "engines.b.tls",
            ),
            (TWO.replace("tcp://", "http://"), "engines.b.endpoint"),
            (TWO.replace(", address: 10.0.0.1", ""), "engines.a.address"),
            (
                TWO.replace(
                    "address: 10.0.0.1",
                    "address: 10.0.0.1, identity: id_ed25519",
                ),
                "engines.a.identity",
            ),
            (TWO.replace("address: 10.0.0.1", "address: ten"), "address"),
        ];
        for (text, field) in cases {
            let e = lab(&text).unwrap_err();
            assert!(e.contains(field) && e.contains("lab.yaml"), "{field}: {e}");
        }
    }
}
