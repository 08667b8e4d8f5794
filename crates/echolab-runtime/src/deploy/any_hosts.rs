//! [`AnyHosts`]: the hosts of whichever runtime a run chose, so that the launcher's stages are
//! written once against one [`Hosts`] type.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::anyhow;
use echolab_core::cmd::{BenchCmd, Ready, ServerLaunch};
use echolab_core::results::{LinkCounters, ResourceSample};

use crate::docker::docker_hosts::{DockerHosts, DockerServer};
use crate::docker::linktap::LinkReading;
use crate::hosts::{Hosts, ProcOutput};
use crate::local::{LocalHosts, LocalServer};

/// The hosts of a run: processes on this machine, or containers on one or more engines.
pub enum AnyHosts {
    /// Processes on this machine.
    Local(LocalHosts),
    /// Containers (one engine or a lab's); boxed, as they hold far more than processes do.
    Docker(Box<DockerHosts>),
}

/// A running server on [`AnyHosts`].
pub enum AnyServer {
    /// A local process.
    Local(LocalServer),
    /// A process in a container.
    Docker(DockerServer),
}

/// A reading of the link's counters on [`AnyHosts`]: only containers behind a link have one.
pub struct AnyReading(LinkReading);

/// The error of a server handed to hosts of another backend (a bug, never user input).
fn mismatch() -> anyhow::Error {
    anyhow!("internal: a server of one backend handed to the hosts of another")
}

impl Hosts for AnyHosts {
    type Server = AnyServer;
    type LinkReading = AnyReading;

    async fn fresh_hosts(&mut self) -> anyhow::Result<bool> {
        match self {
            Self::Local(h) => h.fresh_hosts().await,
            Self::Docker(h) => h.fresh_hosts().await,
        }
    }

    async fn link_snapshot(&mut self) -> Option<anyhow::Result<AnyReading>> {
        match self {
            // Local processes share this machine's loopback: no link to read.
            Self::Local(_) => None,
            Self::Docker(h) => h.link_snapshot().await.map(|r| r.map(AnyReading)),
        }
    }

    fn link_counters(before: &AnyReading, after: &AnyReading) -> anyhow::Result<LinkCounters> {
        DockerHosts::link_counters(&before.0, &after.0)
    }

    fn server_bind(&self) -> IpAddr {
        match self {
            Self::Local(h) => h.server_bind(),
            Self::Docker(h) => h.server_bind(),
        }
    }

    fn target(&self, ready: &Ready) -> SocketAddr {
        match self {
            Self::Local(h) => h.target(ready),
            Self::Docker(h) => h.target(ready),
        }
    }

    async fn start_server(&mut self, cmd: &ServerLaunch) -> anyhow::Result<(AnyServer, Ready)> {
        match self {
            Self::Local(h) => h
                .start_server(cmd)
                .await
                .map(|(s, r)| (AnyServer::Local(s), r)),
            Self::Docker(h) => h
                .start_server(cmd)
                .await
                .map(|(s, r)| (AnyServer::Docker(s), r)),
        }
    }

    async fn run_bench(
        &mut self,
        cmd: &BenchCmd,
        server: &AnyServer,
        window_start: Duration,
    ) -> anyhow::Result<(ProcOutput, Vec<ResourceSample>)> {
        match (self, server) {
            (Self::Local(h), AnyServer::Local(s)) => h.run_bench(cmd, s, window_start).await,
            (Self::Docker(h), AnyServer::Docker(s)) => h.run_bench(cmd, s, window_start).await,
            _ => Err(mismatch()),
        }
    }

    async fn trace_bench(&mut self, cmd: &BenchCmd) -> anyhow::Result<ProcOutput> {
        match self {
            Self::Local(h) => h.trace_bench(cmd).await,
            Self::Docker(h) => h.trace_bench(cmd).await,
        }
    }

    async fn stop_server(&mut self, server: AnyServer) -> anyhow::Result<ProcOutput> {
        match (self, server) {
            (Self::Local(h), AnyServer::Local(s)) => h.stop_server(s).await,
            (Self::Docker(h), AnyServer::Docker(s)) => h.stop_server(s).await,
            _ => Err(mismatch()),
        }
    }
}
