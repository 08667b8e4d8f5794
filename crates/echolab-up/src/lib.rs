//! `echolab-up`: run a seed experiment under a network profile, in containers (or as local
//! processes when no Docker engine is reachable), verify the path by calibration, collect
//! every run into a results directory, and clean up on every path (docs/architecture.md,
//! "Data flow").
//!
//! - [`cli`], [`app`]: the command line and one call from start to end; [`down_cmd`]:
//!   `--down`; [`lab`]: the lab file of a multi-machine run (`--lab`); [`explain`]:
//!   `--explain`, the reruns under the seed's settings.
//! - [`catalog`], [`plan`]: inputs (profiles, experiments) and the runs they expand to, in
//!   shuffled rounds; [`cpuplan`]: which CPUs each host gets.
//! - [`image_archive`]: the lab image as a deterministic archive; [`docker`]: the Docker
//!   backend (its `image` module loads the archive into the engine);
//!   [`local`]: the local backend; [`hosts`]: what both provide.
//! - [`commands`]: echo-server/echo-bench command lines and output parsing.
//! - [`rtt_probe`]: calibration of RTT with the lab's own echo-server and echo-bench on the
//!   cells' path; [`runner`]: the per-run loop, written once for all backends.
//! - [`results_dir`], [`environment`], [`report`]: what is written and recorded.
//! - [`hold`]: the small jobs the binary does inside the lab image (holding a namespace open,
//!   signalling a process); the network jobs there are echolab-netem's.
//! - [`custom_server`]: the in-image job that runs a researcher's own server in place of
//!   echo-server.

pub mod app;
pub(crate) mod catalog;
pub mod cli;
pub mod commands;
pub(crate) mod cpuplan;
pub mod custom_server;
pub mod docker;
pub(crate) mod down_cmd;
pub(crate) mod environment;
pub mod explain;
pub mod hold;
pub(crate) mod hosts;
pub mod image_archive;
pub(crate) mod inputs;
pub mod lab;
pub(crate) mod local;
pub(crate) mod plan;
pub(crate) mod quiet;
pub(crate) mod repetitions;
pub(crate) mod report;
pub(crate) mod results_dir;
pub mod rtt_probe;
pub(crate) mod runner;
