//! echolab's link impairment.
//!
//! A link host routes between the client network and the server network and impairs both
//! directions (docs/architecture.md, "Topologies"), with one of two backends:
//! - [`kernel`]: a netem root qdisc per direction, installed, read back and removed over
//!   rtnetlink (`nl`), plus [`kernel::probe`] for whether the kernel has sch_netem;
//! - [`wire`]: for kernels without sch_netem, a userspace process that carries packets through
//!   TUN devices and applies delay, jitter, loss, rate and a bounded queue itself.
//!
//! [`calibrate`] measures RTT and goodput across the link and compares them with the profile
//! (`echolab_core::profile`). With the `testbed` feature (this crate's tests and examples),
//! `testbed` builds throwaway client/link/server network namespaces for tests and
//! measurements.

pub mod calibrate;
pub mod cli;
pub mod kernel;
pub mod netdev;
pub(crate) mod nl;
pub mod route;
#[cfg(feature = "testbed")]
pub mod testbed;
pub mod wire;
