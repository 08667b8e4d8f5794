//! echolab's runtime: it deploys a lab's hosts and removes them. A host is a container made
//! through the Docker API ([`docker`]) or, where no engine is reachable, a local process
//! ([`local`]); both implement [`hosts::Hosts`], the one interface the launcher's stages run
//! against (docs/architecture.md, "Backends").
//!
//! - [`deploy`]: the launcher's one interface: reach a runtime, deploy a run's hosts on it
//!   (every backend and shape) with the path's raw calibration readings, tear them down.
//! - [`hosts`]: what every backend provides (start a server, run a client, sample, read the
//!   link's counters) and the deadlines they keep.
//! - [`docker`]: the Docker backend: engines, the lab image, topologies, links, privileges,
//!   sampling, cleanup. [`local`]: the local backend.
//! - [`image_archive`]: the lab image as a deterministic archive of the lab's own binaries and
//!   their shared libraries.
//! - [`settle`]: waiting until the host is quiet before a measured window.
//! - [`environment`]: the machine and software a run happens on, for the manifest.
//! - [`hold`], [`custom_server`]: the jobs the launcher's binary does inside the lab image
//!   (holding a namespace open, signalling a process, running a researcher's own server).
//!
//! The runtime knows nothing of experiments' verdicts or the results directory, and judges
//! no calibration (core does): it is handed a run's inputs and returns records and readings; what to run, in which order, and what the records mean
//! is the launcher's (`echolab-up`).

pub mod custom_server;
pub mod deploy;
pub mod docker;
pub mod environment;
pub mod hold;
pub mod hosts;
pub mod image_archive;
pub mod local;
pub mod settle;
