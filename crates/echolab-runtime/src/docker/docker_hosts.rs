//! [`DockerHosts`]: the [`Hosts`] implementation on a run's containers, loopback or behind a
//! link: every program of a cell is a `docker exec` in the server or client host, and a cell
//! that wants fresh hosts gets its containers made again the way they were first made.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::anyhow;
use bollard::Docker;
use echolab_core::cmd::{BenchCmd, Job, JobSignal, Ready, ServerLaunch, SignalJob};
use echolab_core::results::ResourceSample;

use super::cgroup_sampling::Sampler;
use super::client_shards::ClientHost;
use super::link::endpoints::{Endpoints, MadeEndpoints};
use super::linktap::LinkReading;
use super::topology::{remove_host, up_loopback, LoopbackSpec};
use super::{deadlines, exec};
use crate::hosts::{Hosts, ProcOutput, BENCH_DEADLINE, READY_DEADLINE, STOP_DEADLINE};
use crate::image_archive::IMAGE_BIN_DIR;

/// The hosts of a run on Docker.
pub struct DockerHosts {
    /// The engine the server host is on.
    docker: Docker,
    /// The engine the client host is on: the same as `docker` but in a lab run
    /// ([`Remake::Lab`]).
    client_docker: Docker,
    server: String,
    client: String,
    /// A lab run's other client machines (`roles.client: [b, c]`), after the first
    /// (`client_docker`, `client`); with any, every run is split between them all
    /// ([`super::client_shards`]).
    more_clients: Vec<ClientHost>,
    /// The first client's engine, as the lab file names it ("" outside a lab).
    client_engine: String,
    /// Its endpoint, as the lab file gives it ("" outside a lab).
    client_endpoint: String,
    /// The server's engine and its endpoint, as the lab file gives them ("" outside a lab).
    server_engine: (String, String),
    /// Where the client reaches the server (127.0.0.1 for loopback, the server's address on
    /// its network behind a link).
    server_addr: IpAddr,
    bind: IpAddr,
    /// How to make client and server again for a cell of their own.
    remake: Remake,
    /// The userspace wires' counters, when they carry the link: one wire, or one per client
    /// machine of a lab run on a link profile (read as one, [`super::wiretap::summed`]).
    wires: Vec<super::wiretap::WireTap>,
    /// Kernel netem's qdiscs, when they carry the link: one link host's, or one per client
    /// machine of a lab run (read as one, [`super::qdisctap::between`]).
    qdiscs: Vec<super::qdisctap::QdiscTap>,
}

/// What it takes to make a run's client and server hosts again.
#[derive(Debug, Clone)]
pub enum Remake {
    /// Loopback: the server in a namespace with only `lo`, the client in the server's.
    Loopback(LoopbackSpec),
    /// Behind a link: each on its own network, routed through the link host.
    Link(Endpoints),
    /// A lab run: each on its own machine's engine. Not made again: the server (and, on
    /// profile `native`, the client) shares its machine's network namespace (host
    /// networking), which a new container would not make fresh.
    Lab,
}

/// A running echo-server exec.
pub struct DockerServer {
    stream: exec::Streaming,
    pid: u32,
}

/// The output of a server whose process ended before it was stopped.
///
/// # Errors
/// The engine could not say how it ended.
async fn exited_before_stop(docker: &Docker, server: DockerServer) -> anyhow::Result<ProcOutput> {
    let mut out = exec::finish(docker, server.stream, STOP_DEADLINE).await?;
    out.exited_before_stop = true;
    Ok(out)
}

impl DockerHosts {
    /// Brings up the loopback topology ([`up_loopback`]); returns the hosts and their
    /// recorded settings.
    ///
    /// # Errors
    /// As [`up_loopback`].
    pub async fn loopback(
        docker: &Docker,
        spec: &LoopbackSpec,
    ) -> anyhow::Result<(Self, BTreeMap<String, serde_json::Value>)> {
        let (made, records) = up_loopback(docker, spec).await?;
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let hosts = DockerHosts {
            docker: docker.clone(),
            client_docker: docker.clone(),
            server: made.server,
            client: made.client,
            more_clients: Vec::new(),
            client_engine: String::new(),
            client_endpoint: String::new(),
            server_engine: Default::default(),
            server_addr: loopback,
            bind: loopback,
            remake: Remake::Loopback(spec.clone()),
            wires: Vec::new(),
            qdiscs: Vec::new(),
        };
        Ok((hosts, records))
    }

    /// Hosts behind a link: the server listens on all addresses and is reached at `server_addr`.
    pub fn behind_link(
        docker: &Docker,
        made: MadeEndpoints,
        endpoints: Endpoints,
        wire: Option<super::wiretap::WireTap>,
        qdiscs: Option<super::qdisctap::QdiscTap>,
    ) -> Self {
        Self {
            docker: docker.clone(),
            client_docker: docker.clone(),
            server: made.server,
            client: made.client,
            more_clients: Vec::new(),
            client_engine: String::new(),
            client_endpoint: String::new(),
            server_engine: Default::default(),
            server_addr: made.server_ip,
            bind: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            remake: Remake::Link(endpoints),
            wires: wire.into_iter().collect(),
            qdiscs: qdiscs.into_iter().collect(),
        }
    }

    /// Hosts of a lab run: `server` on `server_docker`'s machine (host networking), reached
    /// at `server_addr`, and a client host on each client machine, given as ((engine,
    /// container), (engine name, endpoint)), at least one: host networking, or each behind a
    /// link host on its machine whose wire's counters are read (`wires`, together). The
    /// server's engine is named by (name, endpoint) too, for errors.
    pub fn on_machines(
        (server_docker, server, server_engine): (&Docker, String, (String, String)),
        clients: Vec<((Docker, String), (String, String))>,
        server_addr: IpAddr,
        wires: Vec<super::wiretap::WireTap>,
        qdiscs: Vec<super::qdisctap::QdiscTap>,
    ) -> Self {
        let mut clients = clients
            .into_iter()
            .map(|((docker, container), (engine, endpoint))| ClientHost {
                docker,
                container,
                engine,
                endpoint,
            });
        let first = clients.next().expect("a lab run has a client machine");
        Self {
            docker: server_docker.clone(),
            client_docker: first.docker,
            server,
            client: first.container,
            more_clients: clients.collect(),
            client_engine: first.engine,
            client_endpoint: first.endpoint,
            server_engine,
            server_addr,
            bind: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            remake: Remake::Lab,
            wires,
            qdiscs,
        }
    }

    /// Runs `calibration` (which must not use these hosts) and, when the userspace wire
    /// carries the link, adds the wire's counters across it to the record: what calibration
    /// sent and what the link dropped.
    ///
    /// # Errors
    /// Calibration's, or the wire's counters could not be read.
    pub async fn count_link(
        &mut self,
        calibration: impl std::future::Future<
            Output = anyhow::Result<echolab_core::results::CalibrationRecord>,
        >,
    ) -> anyhow::Result<echolab_core::results::CalibrationRecord> {
        let before = self.link_snapshot().await.transpose()?;
        let mut record = calibration.await?;
        let after = self.link_snapshot().await.transpose()?;
        if let (Some(b), Some(a)) = (before, after) {
            record.link_counters = Some(b.until(&a)?);
        }
        Ok(record)
    }

    /// Every client host, the first one first.
    fn clients(&self) -> Vec<ClientHost> {
        let first = ClientHost {
            docker: self.client_docker.clone(),
            container: self.client.clone(),
            engine: self.client_engine.clone(),
            endpoint: self.client_endpoint.clone(),
        };
        std::iter::once(first)
            .chain(self.more_clients.iter().cloned())
            .collect()
    }

    async fn signal(
        &self,
        docker: &Docker,
        container: &str,
        target: &str,
        signal: JobSignal,
    ) -> anyhow::Result<ProcOutput> {
        let cmd = Job::Signal(SignalJob {
            target: target.into(),
            signal,
        })
        .command(IMAGE_BIN_DIR);
        exec::run(docker, container, &cmd, STOP_DEADLINE).await
    }
}

impl Hosts for DockerHosts {
    type Server = DockerServer;
    type LinkReading = LinkReading;

    fn link_counters(
        before: &LinkReading,
        after: &LinkReading,
    ) -> anyhow::Result<echolab_core::results::LinkCounters> {
        before.until(after)
    }

    async fn link_snapshot(&mut self) -> Option<anyhow::Result<LinkReading>> {
        if !self.qdiscs.is_empty() {
            let mut all = Vec::with_capacity(self.qdiscs.len());
            for tap in &self.qdiscs {
                match tap.snapshot().await {
                    Ok(s) => all.push(s),
                    Err(e) => return Some(Err(e)),
                }
            }
            return Some(Ok(LinkReading::Qdiscs(all)));
        }
        if self.wires.is_empty() {
            return None;
        }
        let mut all = Vec::with_capacity(self.wires.len());
        for tap in &mut self.wires {
            match tap.snapshot().await {
                Ok(stats) => all.push(stats),
                Err(e) => return Some(Err(e)),
            }
        }
        Some(super::wiretap::summed(all).map(|w| LinkReading::Wire(Box::new(w))))
    }

    async fn fresh_hosts(&mut self) -> anyhow::Result<bool> {
        if matches!(self.remake, Remake::Lab) {
            return Ok(false);
        }
        // The client first: in loopback it lives in the server's namespace.
        remove_host(&self.docker, &self.client).await?;
        remove_host(&self.docker, &self.server).await?;
        match self.remake.clone() {
            Remake::Loopback(spec) => {
                let (fresh, _) = up_loopback(&self.docker, &spec).await?;
                self.server = fresh.server;
                self.client = fresh.client;
            }
            Remake::Link(endpoints) => {
                let made = endpoints.make(&self.docker).await?;
                self.server = made.server;
                self.client = made.client;
                self.server_addr = made.server_ip;
            }
            Remake::Lab => unreachable!("answered above"),
        }
        Ok(true)
    }

    fn server_bind(&self) -> IpAddr {
        self.bind
    }

    fn target(&self, ready: &Ready) -> SocketAddr {
        SocketAddr::new(self.server_addr, ready.addr.port())
    }

    async fn start_server(
        &mut self,
        server: &ServerLaunch,
    ) -> anyhow::Result<(DockerServer, Ready)> {
        let started = self.start_server_here(server).await;
        started.map_err(|e| self.on_server_engine(e))
    }

    async fn run_bench(
        &mut self,
        bench: &BenchCmd,
        _server: &DockerServer,
        window_start: std::time::Duration,
    ) -> anyhow::Result<(ProcOutput, Vec<ResourceSample>)> {
        let sampler = Sampler::start(&self.docker, &self.server, window_start).await;
        // A timed run may take its warm-up and window plus a grace; one that counts requests
        // has only the engine's watchdog (`deadlines::within`) and the long bound.
        let deadline = bench
            .planned()
            .map_or(BENCH_DEADLINE, |p| p + deadlines::STREAM_GRACE);
        let result = if self.more_clients.is_empty() {
            let mut cmd = vec![format!("{IMAGE_BIN_DIR}/{}", BenchCmd::PROGRAM)];
            cmd.extend(bench.argv());
            exec::run(&self.client_docker, &self.client, &cmd, deadline)
                .await
                .map_err(|e| {
                    super::engine::on_engine(&self.client_engine, &self.client_endpoint, e)
                })
        } else {
            super::client_shards::run(&self.clients(), bench, deadline).await
        };
        let samples = sampler.stop().await;
        match result {
            Ok(out) => Ok((out, samples)),
            // An engine that stopped answering takes no signal; the run stops and teardown
            // says what is left there.
            Err(e) if deadlines::is_no_answer(&e) => Err(e),
            Err(e) => {
                for c in self.clients() {
                    let _ = self
                        .signal(&c.docker, &c.container, "echo-bench", JobSignal::Kill)
                        .await;
                }
                Err(e)
            }
        }
    }

    async fn trace_bench(&mut self, bench: &BenchCmd) -> anyhow::Result<ProcOutput> {
        if !self.more_clients.is_empty() {
            return Err(anyhow!(
                "strace: a run split over several client machines is not traced (each machine's share would be counted alone)"
            ));
        }
        let mut cmd = vec![format!("{IMAGE_BIN_DIR}/strace")];
        cmd.extend(crate::hosts::STRACE_ARGS.iter().map(|a| a.to_string()));
        cmd.push(format!("{IMAGE_BIN_DIR}/{}", BenchCmd::PROGRAM));
        cmd.extend(bench.argv());
        exec::run(&self.client_docker, &self.client, &cmd, BENCH_DEADLINE)
            .await
            .map_err(|e| super::engine::on_engine(&self.client_engine, &self.client_endpoint, e))
    }

    async fn stop_server(&mut self, server: DockerServer) -> anyhow::Result<ProcOutput> {
        let stopped = self.stop_server_here(server).await;
        stopped.map_err(|e| self.on_server_engine(e))
    }
}

impl DockerHosts {
    /// `e` said of the server's engine when that engine stopped answering (it is the cause
    /// then); as it is otherwise.
    fn on_server_engine(&self, e: anyhow::Error) -> anyhow::Error {
        if deadlines::is_no_answer(&e) {
            super::engine::on_engine(&self.server_engine.0, &self.server_engine.1, e)
        } else {
            e
        }
    }

    /// [`Hosts::start_server`] on the server's engine.
    async fn start_server_here(
        &mut self,
        server: &ServerLaunch,
    ) -> anyhow::Result<(DockerServer, Ready)> {
        let args = server.argv();
        let mut cmd = vec![format!("{IMAGE_BIN_DIR}/{}", server.program())];
        cmd.extend_from_slice(&args);
        let mut stream = exec::start(&self.docker, &self.server, &cmd, Ready::PREFIX).await?;
        let ready = tokio::time::timeout(READY_DEADLINE, &mut stream.ready).await;
        match ready {
            Ok(Ok(line)) => {
                let r = Ready::parse(&line).ok_or_else(|| {
                    anyhow!("echo-server's readiness line is not of the expected form ({}ADDR model=M workers=N pid=P): {line}", Ready::PREFIX)
                })?;
                let pid = r.pid;
                Ok((DockerServer { stream, pid }, r))
            }
            Ok(Err(_)) => {
                // The output closed without a readiness line: the server exited.
                let out = exec::finish(&self.docker, stream, STOP_DEADLINE).await?;
                Err(anyhow!(
                    "echo-server {} exited before it was ready ({})",
                    args.join(" "),
                    out.describe()
                ))
            }
            Err(_) => {
                let _ = self
                    .signal(&self.docker, &self.server, "echo-server", JobSignal::Kill)
                    .await;
                Err(anyhow!(
                    "echo-server {} printed no readiness line within {READY_DEADLINE:?}; killed",
                    args.join(" ")
                ))
            }
        }
    }

    /// [`Hosts::stop_server`] on the server's engine.
    async fn stop_server_here(&mut self, server: DockerServer) -> anyhow::Result<ProcOutput> {
        // Its output closes when the process (or its container) is gone.
        if server.stream.output.is_finished() {
            return exited_before_stop(&self.docker, server).await;
        }
        let sent = self
            .signal(
                &self.docker,
                &self.server,
                &server.pid.to_string(),
                JobSignal::Term,
            )
            .await;
        if sent.as_ref().map_or(true, |s| s.exit_code != Some(0)) {
            // It may have died between the check and the signal.
            if server.stream.output.is_finished() {
                return exited_before_stop(&self.docker, server).await;
            }
            let why = match sent {
                Ok(s) => s.describe(),
                Err(e) if deadlines::is_no_answer(&e) => {
                    return Err(e.context(format!("SIGTERM to echo-server pid {}", server.pid)))
                }
                Err(e) => format!("{e:#}"),
            };
            return Err(anyhow!("SIGTERM to echo-server pid {}: {why}", server.pid));
        }
        match exec::finish(&self.docker, server.stream, STOP_DEADLINE).await {
            Ok(out) => Ok(out),
            Err(e) if deadlines::is_no_answer(&e) => {
                Err(e.context(format!("echo-server pid {} after SIGTERM", server.pid)))
            }
            Err(e) => {
                let _ = self
                    .signal(
                        &self.docker,
                        &self.server,
                        &server.pid.to_string(),
                        JobSignal::Kill,
                    )
                    .await;
                Err(anyhow!(
                    "echo-server pid {} after SIGTERM: {e:#}; killed",
                    server.pid
                ))
            }
        }
    }
}
