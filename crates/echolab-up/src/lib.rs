//! `echolab-up`: run a seed experiment under a network profile, in containers (or as local
//! processes when no Docker engine is reachable), verify the path by calibration, collect
//! every run into a results directory, and clean up on every path (docs/architecture.md,
//! "Data flow").
//!
//! The launcher keeps the stages (inputs → plan → image → topology → link → calibration →
//! cells → report); the hosts they run on are deployed and removed by echolab-runtime.
//!
//! - [`cli`], [`app`]: the command line and one call from start to end; `down`: `--down`;
//!   [`explain`]: `--explain`, the reruns under the seed's settings; [`replay`]: `--replay`,
//!   a recorded run again and the comparison of the two.
//! - `inputs`, `catalog`: the run's inputs (profiles, experiments, the lab file) resolved
//!   and checked before anything is made; `plan`: the runs they expand to, in shuffled
//!   rounds; `cpuplan`: which CPUs each host gets; `adaptive`: which cells get another
//!   round.
//! - [`commands`]: echo-server/echo-bench command lines and output parsing.
//! - [`rtt_probe`]: calibration of RTT with the lab's own echo-server and echo-bench on the
//!   cells' path; `runner`: the per-run loop, written once for all backends.
//! - `results_dir`, `report`: what is written and recorded.
//!
//! Every backend is deployed and torn down through the runtime's one interface
//! (`echolab_runtime::deploy`); the launcher uses nothing of the runtime's Docker modules.

pub(crate) mod adaptive;
pub mod app;
pub(crate) mod catalog;
pub mod cli;
pub mod commands;
pub(crate) mod cpuplan;
pub(crate) mod down;
pub mod explain;
pub(crate) mod inputs;
pub(crate) mod plan;
pub mod replay;
pub(crate) mod report;
pub(crate) mod results_dir;
pub mod rtt_probe;
pub(crate) mod runner;
