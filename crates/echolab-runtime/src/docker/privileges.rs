//! Least privilege for the lab's containers: what each role may do, as the security fields of
//! its container (user, capabilities, devices, root filesystem, `no-new-privileges`, seccomp,
//! pids and memory limits) and as the manifest records them.
//!
//! | role | user | capabilities | why |
//! |---|---|---|---|
//! | server, client | 65534:65534 | none | bind ports above 1024, open sockets, raise the soft nofile limit within the hard one: none of it needs a capability |
//! | link | 0:0 | NET_ADMIN, NET_RAW, SYS_NICE | TUN devices, addresses, routes and qdiscs; packet sockets for the wire's arrival stamps; real-time priority for the wire's threads (with a real-time budget, [`LINK_REALTIME_RUNTIME_US`]); root because Docker gives a non-root user no capability |
//! | route helper | 0:0 | NET_ADMIN | one route in a client or server namespace, then it exits |
//!
//! Every container drops every capability first (`cap_drop: ALL`), runs with
//! `no-new-privileges` and a read-only root filesystem, is never privileged, and has a pids
//! and a memory limit. Client and server limits grow with the experiment's connections
//! ([`endpoint_limits`]); the link's with the profile's queues ([`link_limits`]).
//!
//! Nothing in the lab writes files (the profile reaches echolab-netem on its command line,
//! `--profile-json`), so no host needs a tmpfs. The link and client hosts of a link topology
//! get one anonymous volume at [`SCRATCH_DIR`] (removed with the container): `docker cp`
//! cannot write to a read-only root, and a lab kept up for manual poking (`--keep`) needs a
//! place to bring a profile or a tool into those two hosts.

use std::collections::BTreeMap;

use bollard::models::{ContainerCreateBody, DeviceMapping, HostConfig, Mount, MountType};
use echolab_core::experiment::{Cell, Experiment};
use echolab_core::profile::{Profile, Topology};
use echolab_core::results::HostPrivileges;

/// The user client and server run as: `nobody`'s numeric uid and gid (the image has no
/// /etc/passwd, so a name would not resolve).
pub const NOBODY: &str = "65534:65534";
/// Root, for the hosts that need a capability: Docker 20.10 gives a non-root user's processes
/// no capability (no ambient set), so NET_ADMIN only works as uid 0.
pub const ROOT: &str = "0:0";
/// The writable volume of the link and client hosts on their read-only root, for files
/// brought in by hand with `docker cp`.
pub const SCRATCH_DIR: &str = "/etc/echolab";

/// A capability, device or writable path a role holds, with the reason it needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Capability name without `CAP_` (`NET_ADMIN`), device path, or directory.
    pub name: &'static str,
    /// Why the role needs it.
    pub reason: &'static str,
}

const NET_ADMIN_LINK: Grant = Grant {
    name: "NET_ADMIN",
    reason: "the wire creates TUN devices (TUNSETIFF) and sets their addresses and routes over rtnetlink; kernel netem installs qdiscs; both need CAP_NET_ADMIN in the link's namespace",
};
const NET_RAW_LINK: Grant = Grant {
    name: "NET_RAW",
    reason: "the wire reads the kernel's arrival stamp of every packet from a packet socket (AF_PACKET) on each TUN, so that a packet's delay counts from when it arrived, not from when the wire woke up to read it",
};
const NET_ADMIN_ROUTE: Grant = Grant {
    name: "NET_ADMIN",
    reason: "adds one route (RTM_NEWROUTE) in the client's or server's network namespace, which it joins, then exits",
};
const SYS_NICE_LINK: Grant = Grant {
    name: "SYS_NICE",
    reason: "the wire's direction threads take real-time priority (SCHED_FIFO 50) so that fair-scheduled work on the machine does not delay a packet's release: with two CPU hogs beside a crossnet run, release-error p99 was 162-242 us with it and 246-2,859 us without (wire_perf's release section with two CPU hogs)",
};
/// The real-time CPU budget asked for the link host, µs per `cpu.rt_period_us` (1 s): where
/// the engine uses cgroup v1 with real-time group scheduling, a container's threads cannot
/// take SCHED_FIFO without one, CAP_SYS_NICE or not. 400 ms leaves room for two link hosts
/// under the 950 ms that `dockerd --cpu-rt-runtime=950000` gives the engine's cgroup; the
/// wire gives up real-time priority by itself when it is overloaded, so it does not spend it.
pub const LINK_REALTIME_RUNTIME_US: i64 = 400_000;
const TUN_DEVICE: Grant = Grant {
    name: "/dev/net/tun",
    reason: "the userspace wire's TUN devices are opened through it (mode 0666 on the host, so root needs no CAP_DAC_OVERRIDE)",
};
const SCRATCH_VOLUME: Grant = Grant {
    name: SCRATCH_DIR,
    reason: "docker cp cannot write to a read-only root: where files are brought into a kept lab host by hand (a profile, a tool); an anonymous volume, removed with the container",
};

/// The seccomp profile of a container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Seccomp {
    /// The engine's own default profile.
    #[default]
    EngineDefault,
    /// [`DEFAULT_WITH_URING`]: moby's default profile plus the three io_uring calls, for a
    /// server host whose engine's default profile denies io_uring.
    DefaultWithUring,
    /// No seccomp filter: `--allow-uring-unconfined`, when even [`Seccomp::DefaultWithUring`]
    /// does not let io_uring work.
    Unconfined,
}

/// moby's default seccomp profile with `io_uring_setup`, `io_uring_enter` and
/// `io_uring_register` allowed, and nothing else changed: the copy of moby/moby v28.5.2
/// (commit 89c5e8fd66634b6128fc4c0e6f1236e2540e46e0),
/// `vendor/github.com/moby/profiles/seccomp/default.json` (module
/// github.com/moby/profiles/seccomp v0.1.0, git blob dafe5cf6a6a3e7f4766037ed0366631b06968160),
/// with one rule appended that allows the three calls. moby removed them from its default in
/// v25.0 (commit 891241e7e7, "seccomp: block io_uring_* syscalls in default profile"); the
/// engine API does not hand out its default profile, hence the copy.
pub const DEFAULT_WITH_URING: &str = include_str!("seccomp-default-with-io-uring.json");

impl Seccomp {
    /// The `--security-opt` value, if any (`seccomp=<profile JSON>` or `seccomp=unconfined`).
    pub fn security_opt(&self) -> Option<String> {
        match self {
            Seccomp::EngineDefault => None,
            Seccomp::DefaultWithUring => Some(format!("seccomp={DEFAULT_WITH_URING}")),
            Seccomp::Unconfined => Some("seccomp=unconfined".into()),
        }
    }

    /// How the manifest names it.
    pub fn describe(&self) -> String {
        match self {
            Seccomp::EngineDefault => "docker default".into(),
            Seccomp::DefaultWithUring => format!(
                "moby v28.5.2 default plus io_uring_setup, io_uring_enter, io_uring_register (sha256 {})",
                crate::image_archive::sha256_hex(DEFAULT_WITH_URING.as_bytes())
            ),
            Seccomp::Unconfined => "unconfined (--allow-uring-unconfined)".into(),
        }
    }
}

/// A container's pids and memory limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most tasks (processes and threads) at once: the pids cgroup's limit.
    pub pids: i64,
    /// Memory limit, bytes; memory+swap is set to the same, so the container does not swap.
    pub memory_bytes: i64,
    /// How the two were sized, for the manifest.
    pub basis: String,
}

/// Memory of a client or server host before any connection: the binaries' pages, the
/// multi-threaded runtimes of echolab-netem's calibration tools, strace, io_uring's 4 MiB
/// buffer pool, and headroom for TIME_WAIT sockets of short-connection cells.
pub const ENDPOINT_BASE_MEMORY: u64 = 256 << 20;
/// Tasks of a client or server host before any connection: the hold process, the execs of a
/// cell, strace, and the tokio model's and calibration tools' runtimes.
pub const ENDPOINT_BASE_PIDS: u64 = 256;
/// A TCP socket's receive and send buffers at the kernel's defaults (tcp_rmem's and
/// tcp_wmem's middle values, 131072 and 16384; ip-sysctl.rst), which the lab leaves as they are.
pub const TCP_DEFAULT_BUFFERS: u64 = 131_072 + 16_384;
/// Stack of a per-connection thread: echo-server's thread model and echo-bench's thread
/// engine both ask for 128 KiB.
pub const CONN_THREAD_STACK: u64 = 128 << 10;
/// Memory of the link host besides its queues: the wire's binary, threads and 64 KiB
/// scratch buffers.
pub const LINK_BASE_MEMORY: u64 = 128 << 20;
/// The most a queued packet of the wire can take: its TUN read buffer (`MAX_PACKET`).
pub const LINK_PACKET_BYTES: u64 = 65_535;
/// Tasks of the link host: the wire's pump and stats threads and the launcher's execs.
pub const LINK_PIDS: u64 = 128;
/// Tasks of a route helper: one `echolab-netem route` process.
pub const HELPER_PIDS: u64 = 16;
/// Memory of a route helper.
pub const HELPER_MEMORY: u64 = 64 << 20;

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Bytes one connection of `cell` may take in a client or server host: its socket buffers at
/// the kernel's defaults, a thread stack (thread models), the server's read buffer, and one
/// request and one reply.
pub fn per_connection_bytes(cell: &Cell, read_buf: u64) -> u64 {
    TCP_DEFAULT_BUFFERS
        .saturating_add(CONN_THREAD_STACK)
        .saturating_add(read_buf)
        .saturating_add(cell.payload)
        .saturating_add(cell.reply_bytes.unwrap_or(cell.payload))
}

/// The limits of the client and server hosts for `exp` on a machine of `machine_cpus` CPUs:
/// memory [`ENDPOINT_BASE_MEMORY`] plus the largest cell's connections ×
/// [`per_connection_bytes`]; pids [`ENDPOINT_BASE_PIDS`] plus one per connection (the
/// thread-per-connection models and engine) plus one per worker or client thread (default:
/// one per CPU). Both hosts hold the same connections, so they get the same limits.
pub fn endpoint_limits(exp: &Experiment, machine_cpus: u64) -> Limits {
    let read_buf = exp.server.read_buf.0;
    let cells = exp.cells();
    let largest = cells
        .iter()
        .max_by_key(|c| c.conns.saturating_mul(per_connection_bytes(c, read_buf)));
    let (conns, per_conn) =
        largest.map_or((0, 0), |c| (c.conns, per_connection_bytes(c, read_buf)));
    let memory = ENDPOINT_BASE_MEMORY.saturating_add(conns.saturating_mul(per_conn));
    let max_conns = cells.iter().map(|c| c.conns).max().unwrap_or(0);
    let workers = [Some(machine_cpus), exp.server.workers, exp.bench.threads]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(1);
    let pids = ENDPOINT_BASE_PIDS
        .saturating_add(max_conns)
        .saturating_add(workers);
    Limits {
        pids: to_i64(pids),
        memory_bytes: to_i64(memory),
        basis: format!(
            "memory {ENDPOINT_BASE_MEMORY} B + {conns} connections × {per_conn} B (TCP default buffers {TCP_DEFAULT_BUFFERS} + thread stack {CONN_THREAD_STACK} + read buffer {read_buf} + request and reply); pids {ENDPOINT_BASE_PIDS} + {max_conns} connections + {workers} workers or client threads"
        ),
    }
}

/// The link host's limits for `profile`: memory [`LINK_BASE_MEMORY`] plus both directions'
/// queue limits × [`LINK_PACKET_BYTES`]; pids [`LINK_PIDS`].
pub fn link_limits(profile: &Profile) -> Limits {
    let limit = |l: &Option<echolab_core::profile::LinkSpec>| {
        l.as_ref().map_or(0, |l| u64::from(l.effective_limit()))
    };
    let queued = limit(&profile.uplink) + limit(&profile.downlink);
    let memory = LINK_BASE_MEMORY.saturating_add(queued.saturating_mul(LINK_PACKET_BYTES));
    Limits {
        pids: to_i64(LINK_PIDS),
        memory_bytes: to_i64(memory),
        basis: format!(
            "memory {LINK_BASE_MEMORY} B + {queued} queued packets (uplink and downlink limits) × {LINK_PACKET_BYTES} B; pids {LINK_PIDS}"
        ),
    }
}

/// What one container may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Privileges {
    /// `uid:gid` ([`NOBODY`] or [`ROOT`]).
    pub user: &'static str,
    /// Capabilities added back after dropping all.
    pub cap_add: Vec<Grant>,
    /// Devices mapped in.
    pub devices: Vec<Grant>,
    /// Writable anonymous volumes on the read-only root.
    pub volumes: Vec<Grant>,
    /// The seccomp profile.
    pub seccomp: Seccomp,
    /// Pids and memory limits.
    pub limits: Limits,
    /// Real-time CPU budget of the container's cgroup, µs per second (`--cpu-rt-runtime`;
    /// [`LINK_REALTIME_RUNTIME_US`] for the link host); `None` when not asked for, or when
    /// the engine refused it (then `realtime_note` says why).
    pub realtime_runtime_us: Option<i64>,
    /// Why the budget asked for is not there: the engine's refusal.
    pub realtime_note: Option<String>,
}

impl Default for Privileges {
    /// The strictest: a client-like host with the limits of an experiment without connections.
    fn default() -> Self {
        Self::endpoint(
            &Limits {
                pids: to_i64(ENDPOINT_BASE_PIDS),
                memory_bytes: to_i64(ENDPOINT_BASE_MEMORY),
                basis: "base limits of a host without connections".into(),
            },
            Seccomp::EngineDefault,
        )
    }
}

impl Privileges {
    /// A server host (also the io_uring probe host): no capability, [`NOBODY`].
    pub fn endpoint(limits: &Limits, seccomp: Seccomp) -> Self {
        Self {
            user: NOBODY,
            cap_add: vec![],
            devices: vec![],
            volumes: vec![],
            seccomp,
            limits: limits.clone(),
            realtime_runtime_us: None,
            realtime_note: None,
        }
    }

    /// A client host: as a server host under the engine's default seccomp profile, plus,
    /// behind a link, the profile volume (calibration reads the profile there).
    pub fn client(limits: &Limits, behind_link: bool) -> Self {
        Self {
            volumes: if behind_link {
                vec![SCRATCH_VOLUME]
            } else {
                vec![]
            },
            ..Self::endpoint(limits, Seccomp::EngineDefault)
        }
    }

    /// The link host for `profile`: root with NET_ADMIN, NET_RAW, SYS_NICE and
    /// /dev/net/tun, the scratch volume and a real-time budget.
    pub fn link(profile: &Profile) -> Self {
        Self {
            user: ROOT,
            cap_add: vec![NET_ADMIN_LINK, NET_RAW_LINK, SYS_NICE_LINK],
            devices: vec![TUN_DEVICE],
            volumes: vec![SCRATCH_VOLUME],
            seccomp: Seccomp::EngineDefault,
            limits: link_limits(profile),
            realtime_runtime_us: Some(LINK_REALTIME_RUNTIME_US),
            realtime_note: None,
        }
    }

    /// A route helper: root with NET_ADMIN, small fixed limits.
    pub fn route_helper() -> Self {
        Self {
            user: ROOT,
            cap_add: vec![NET_ADMIN_ROUTE],
            devices: vec![],
            volumes: vec![],
            seccomp: Seccomp::EngineDefault,
            limits: Limits {
                pids: to_i64(HELPER_PIDS),
                memory_bytes: to_i64(HELPER_MEMORY),
                basis: format!(
                    "fixed: one short-lived process; pids {HELPER_PIDS}, memory {HELPER_MEMORY} B"
                ),
            },
            realtime_runtime_us: None,
            realtime_note: None,
        }
    }

    /// Sets the container's user and its host config's security fields.
    pub fn apply(&self, body: &mut ContainerCreateBody) {
        body.user = Some(self.user.to_string());
        let hc = body.host_config.get_or_insert_with(HostConfig::default);
        hc.privileged = Some(false);
        hc.cap_drop = Some(vec!["ALL".into()]);
        hc.cap_add = (!self.cap_add.is_empty())
            .then(|| self.cap_add.iter().map(|g| g.name.to_string()).collect());
        hc.devices = (!self.devices.is_empty()).then(|| {
            self.devices
                .iter()
                .map(|d| DeviceMapping {
                    path_on_host: Some(d.name.into()),
                    path_in_container: Some(d.name.into()),
                    cgroup_permissions: Some("rwm".into()),
                })
                .collect()
        });
        hc.readonly_rootfs = Some(true);
        hc.cpu_realtime_runtime = self.realtime_runtime_us;
        hc.mounts = (!self.volumes.is_empty()).then(|| {
            self.volumes
                .iter()
                .map(|v| Mount {
                    target: Some(v.name.into()),
                    typ: Some(MountType::VOLUME),
                    read_only: Some(false),
                    ..Default::default()
                })
                .collect()
        });
        let mut security = vec!["no-new-privileges:true".to_string()];
        security.extend(self.seccomp.security_opt());
        hc.security_opt = Some(security);
        hc.pids_limit = Some(self.limits.pids);
        hc.memory = Some(self.limits.memory_bytes);
        hc.memory_swap = Some(self.limits.memory_bytes);
    }

    /// The manifest's record of it.
    pub fn record(&self) -> HostPrivileges {
        let reasons = |g: &[Grant]| -> BTreeMap<String, String> {
            g.iter()
                .map(|g| (g.name.to_string(), g.reason.to_string()))
                .collect()
        };
        HostPrivileges {
            user: self.user.to_string(),
            cap_drop: vec!["ALL".into()],
            cap_add: reasons(&self.cap_add),
            devices: reasons(&self.devices),
            read_only_rootfs: true,
            writable: reasons(&self.volumes),
            no_new_privileges: true,
            seccomp: self.seccomp.describe(),
            pids_limit: self.limits.pids,
            memory_bytes: self.limits.memory_bytes,
            limits_basis: self.limits.basis.clone(),
        }
    }
}

/// The privileges of every role of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPrivileges {
    /// The server host.
    pub server: Privileges,
    /// The client host.
    pub client: Privileges,
    /// The link host (link topologies).
    pub link: Privileges,
    /// The helpers that set routes (link topologies).
    pub route_helper: Privileges,
}

impl RunPrivileges {
    /// For `exp` on `profile` on a machine of `machine_cpus` CPUs, the server under
    /// `server_seccomp` and the client under `client_seccomp` (each the engine's default unless
    /// that side uses io_uring).
    pub fn new(
        exp: &Experiment,
        profile: &Profile,
        machine_cpus: u64,
        server_seccomp: Seccomp,
        client_seccomp: Seccomp,
    ) -> Self {
        let limits = endpoint_limits(exp, machine_cpus);
        Self {
            server: Privileges::endpoint(&limits, server_seccomp),
            client: Privileges {
                seccomp: client_seccomp,
                ..Privileges::client(&limits, profile.topology == Topology::Link)
            },
            link: Privileges::link(profile),
            route_helper: Privileges::route_helper(),
        }
    }

    /// The manifest's records by role: server and client, and with `link` the link host and
    /// the route helpers.
    pub fn record(&self, link: bool) -> BTreeMap<String, HostPrivileges> {
        let mut out = BTreeMap::new();
        out.insert("server".to_string(), self.server.record());
        out.insert("client".to_string(), self.client.record());
        if link {
            out.insert("link".to_string(), self.link.record());
            out.insert("route-helper".to_string(), self.route_helper.record());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn experiment(yaml: &str) -> Experiment {
        Experiment::parse(yaml, "t.yaml").unwrap()
    }

    fn profile(yaml: &str) -> Profile {
        Profile::from_yaml(yaml, "p.yaml").unwrap()
    }

    const LINK_PROFILE: &str = "name: p\ndescription: d\nsource: s\ntopology: link\nuplink: { delay: 1ms, limit: 100 }\ndownlink: { delay: 1ms, limit: 300 }\nexpected:\n  rtt: { value: 2ms, minus: 1ms, plus: 1ms }\n";
    const LOOPBACK_PROFILE: &str = "name: l\ndescription: d\nsource: s\ntopology: loopback\nexpected:\n  rtt: { value: 50us, minus: 49us, plus: 1ms }\n";

    #[test]
    fn endpoint_memory_grows_with_the_largest_cells_connections() {
        // exp33's scan: 100 to 5000 connections of the 12-byte payload, default 16 KiB read buffer.
        let exp = experiment(
            "name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [short, long]\n    conns: [100, 5000]\n    rounds: [10]\n",
        );
        let l = endpoint_limits(&exp, 2);
        // Per connection: 131072 + 16384 (socket buffers) + 131072 (stack) + 16384 (read buffer)
        // + 12 + 12 (request, reply) = 294936 B; 5000 of them on top of 256 MiB.
        assert_eq!(l.memory_bytes, 268_435_456 + 5000 * 294_936);
        assert_eq!(l.memory_bytes, 1_743_115_456);
        // 256 + 5000 connections + 2 CPUs' worth of client threads.
        assert_eq!(l.pids, 5258);
        assert!(
            l.basis.contains("5000 connections × 294936 B"),
            "{}",
            l.basis
        );
    }

    #[test]
    fn a_cell_with_fewer_but_larger_connections_can_set_the_memory() {
        // With a 4 KiB read buffer: 1000 × (278528 + 4096 + 12 + 12) B = 282,648,000 B, against
        // 100 × (278528 + 4096 + 4194304 + 4194304) B = 867,123,200 B for the 4 MiB payload.
        let exp = experiment(
            "name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [1000]\n    rounds: [1]\n  - servers: [thread]\n    modes: [long]\n    conns: [100]\n    rounds: [1]\n    payload: 4MiB\nserver:\n  read_buf: 4KiB\n  workers: 8\nbench:\n  threads: 4\n",
        );
        let l = endpoint_limits(&exp, 2);
        assert_eq!(l.memory_bytes, 268_435_456 + 867_123_200);
        // 256 + 1000 (the most connections of any cell) + 8 workers (more than 4 threads, 2 CPUs).
        assert_eq!(l.pids, 1264);
    }

    #[test]
    fn a_sustain_cell_counts_its_reply_size() {
        let exp = experiment(
            "name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [sustain]\n    conns: [10]\n    duration: 1s\n    reply_bytes: 1MiB\n",
        );
        // 10 × (147456 + 131072 + 16384 + 12 + 1048576) = 10 × 1343500 B.
        assert_eq!(
            endpoint_limits(&exp, 4).memory_bytes,
            268_435_456 + 13_435_000
        );
        assert_eq!(endpoint_limits(&exp, 4).pids, 256 + 10 + 4);
    }

    #[test]
    fn link_memory_holds_both_queues_of_largest_packets() {
        let l = link_limits(&profile(LINK_PROFILE));
        // 128 MiB + (100 + 300) packets × 65535 B.
        assert_eq!(l.memory_bytes, 134_217_728 + 26_214_000);
        assert_eq!(l.pids, 128);
    }

    fn created(p: &Privileges) -> ContainerCreateBody {
        let mut body = ContainerCreateBody::default();
        p.apply(&mut body);
        body
    }

    fn limits() -> Limits {
        Limits {
            pids: 300,
            memory_bytes: 1 << 30,
            basis: "test".into(),
        }
    }

    #[test]
    fn client_and_server_drop_everything_and_run_as_nobody() {
        let run = RunPrivileges::new(
            &experiment("name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [10]\n    rounds: [1]\n"),
            &profile(LOOPBACK_PROFILE),
            2,
            Seccomp::EngineDefault,
            Seccomp::EngineDefault,
        );
        for p in [&run.server, &run.client] {
            let body = created(p);
            assert_eq!(body.user.as_deref(), Some("65534:65534"));
            let hc = body.host_config.unwrap();
            assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
            assert_eq!(hc.cap_add, None);
            assert_eq!(hc.devices, None);
            assert_eq!(hc.privileged, Some(false));
            assert_eq!(hc.readonly_rootfs, Some(true));
            assert_eq!(hc.mounts, None, "loopback: no profile volume");
            assert_eq!(
                hc.security_opt,
                Some(vec!["no-new-privileges:true".to_string()])
            );
            // 256 + 10 + 2; 256 MiB + 10 × 294936 B.
            assert_eq!(hc.pids_limit, Some(268));
            assert_eq!(hc.memory, Some(268_435_456 + 2_949_360));
            assert_eq!(hc.memory_swap, hc.memory, "no swap beyond the limit");
        }
        let recorded = run.record(false);
        assert_eq!(
            recorded.keys().collect::<Vec<_>>(),
            ["client", "server"],
            "no link roles on loopback"
        );
        assert_eq!(recorded["server"].user, "65534:65534");
        assert!(recorded["server"].cap_add.is_empty() && recorded["server"].writable.is_empty());
    }

    #[test]
    fn the_link_keeps_net_admin_net_raw_and_the_tun_device_with_reasons() {
        let run = RunPrivileges::new(
            &experiment("name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [10]\n    rounds: [1]\n"),
            &profile(LINK_PROFILE),
            2,
            Seccomp::EngineDefault,
            Seccomp::EngineDefault,
        );
        let body = created(&run.link);
        assert_eq!(body.user.as_deref(), Some("0:0"));
        let hc = body.host_config.unwrap();
        assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(
            hc.cap_add,
            Some(vec![
                "NET_ADMIN".to_string(),
                "NET_RAW".to_string(),
                "SYS_NICE".to_string()
            ])
        );
        assert_eq!(hc.cpu_realtime_runtime, Some(LINK_REALTIME_RUNTIME_US));
        for other in [&run.client, &run.server] {
            assert_eq!(
                created(other).host_config.unwrap().cpu_realtime_runtime,
                None
            );
        }
        let dev = &hc.devices.unwrap()[0];
        assert_eq!(
            (
                dev.path_on_host.as_deref(),
                dev.path_in_container.as_deref()
            ),
            (Some("/dev/net/tun"), Some("/dev/net/tun"))
        );
        assert_eq!(hc.readonly_rootfs, Some(true));
        let mounts = hc.mounts.unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].target.as_deref(), Some("/etc/echolab"));
        assert_eq!(mounts[0].typ, Some(MountType::VOLUME));
        assert_eq!(
            mounts[0].source, None,
            "anonymous: removed with the container"
        );
        assert_eq!(
            hc.security_opt,
            Some(vec!["no-new-privileges:true".to_string()])
        );
        assert_eq!(hc.memory, Some(134_217_728 + 26_214_000));
        // Behind a link the client gets the profile volume, the server does not.
        assert!(created(&run.client).host_config.unwrap().mounts.is_some());
        assert!(created(&run.server).host_config.unwrap().mounts.is_none());
        let rec = run.record(true);
        assert_eq!(
            rec.keys().collect::<Vec<_>>(),
            ["client", "link", "route-helper", "server"]
        );
        let link = &rec["link"];
        assert_eq!(
            link.cap_add.keys().collect::<Vec<_>>(),
            ["NET_ADMIN", "NET_RAW", "SYS_NICE"]
        );
        assert!(link.cap_add["SYS_NICE"].contains("SCHED_FIFO"), "{link:?}");
        assert!(link.cap_add["NET_ADMIN"].contains("TUN"), "{link:?}");
        assert!(link.cap_add["NET_RAW"].contains("AF_PACKET"), "{link:?}");
        assert!(link.devices["/dev/net/tun"].contains("wire"), "{link:?}");
        assert!(link.read_only_rootfs && link.no_new_privileges);
    }

    #[test]
    fn a_route_helper_has_only_net_admin() {
        let body = created(&Privileges::route_helper());
        assert_eq!(body.user.as_deref(), Some("0:0"));
        let hc = body.host_config.unwrap();
        assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(hc.cap_add, Some(vec!["NET_ADMIN".to_string()]));
        assert_eq!((hc.devices, hc.mounts), (None, None));
        assert_eq!((hc.pids_limit, hc.memory), (Some(16), Some(64 << 20)));
    }

    #[test]
    fn the_io_uring_profile_is_the_default_plus_three_calls() {
        let opts = created(&Privileges::endpoint(&limits(), Seccomp::DefaultWithUring))
            .host_config
            .unwrap()
            .security_opt
            .unwrap();
        assert_eq!(opts.len(), 2);
        assert_eq!(opts[0], "no-new-privileges:true");
        let json = opts[1].strip_prefix("seccomp=").unwrap();
        let profile: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(profile["defaultAction"], "SCMP_ACT_ERRNO");
        let rules = profile["syscalls"].as_array().unwrap();
        // moby v28.5.2's default has 31 rules; the copy appends one.
        assert_eq!(rules.len(), 32);
        let naming_uring: Vec<_> = rules
            .iter()
            .filter(|r| {
                r["names"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|n| n.as_str().unwrap().starts_with("io_uring"))
            })
            .collect();
        assert_eq!(
            naming_uring.len(),
            1,
            "only the appended rule names io_uring"
        );
        let rule = naming_uring[0];
        assert_eq!(
            rule["names"],
            serde_json::json!(["io_uring_enter", "io_uring_register", "io_uring_setup"])
        );
        assert_eq!(rule["action"], "SCMP_ACT_ALLOW");
        assert!(
            rule.get("args").is_none() && rule.get("includes").is_none(),
            "unconditional: {rule}"
        );
        assert_eq!(rules.last(), Some(rule));
        assert_eq!(
            Seccomp::Unconfined.security_opt().as_deref(),
            Some("seccomp=unconfined")
        );
        assert_eq!(Seccomp::EngineDefault.security_opt(), None);
    }

    #[test]
    fn the_privileges_record_survives_yaml() {
        let exp = experiment("name: t\nquestion: q\nrepetitions: 1\nmatrix:\n  - servers: [epoll-et]\n    modes: [long]\n    conns: [10]\n    rounds: [1]\n");
        let record = RunPrivileges::new(
            &exp,
            &profile(LINK_PROFILE),
            2,
            Seccomp::DefaultWithUring,
            Seccomp::EngineDefault,
        )
        .record(true);
        let text = serde_yaml::to_string(&record).unwrap();
        let back: BTreeMap<String, echolab_core::results::HostPrivileges> =
            serde_yaml::from_str(&text).unwrap();
        assert_eq!(back, record);
        assert_eq!(back["server"].memory_bytes, 268_435_456 + 10 * 294_936);
        assert!(back["server"]
            .seccomp
            .starts_with("moby v28.5.2 default plus io_uring_setup"));
        assert_eq!(back["client"].seccomp, "docker default");
    }
}
