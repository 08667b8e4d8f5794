//! echolab-up against this machine's Docker engine, end to end: the smoke experiment on the
//! loopback and crossnet profiles, cleanup after a forced failure and after Ctrl-C, a lab
//! engine that stops answering mid-run, a second run right after the first, the lab image's
//! id staying the same across builds, and `--explain`'s reruns each under the seed's
//! settings it names.
//!
//! Each test fails, with the engine's reason, when no Docker engine is reachable: the README's
//! test command needs one, and a test that quietly passed without it would hide a broken
//! setup. The lab image is built from the binaries next to echolab-up (target/debug when run
//! by `cargo nextest run --workspace`, which builds every workspace binary first).

#[path = "docker/common.rs"]
mod common;

#[path = "docker/runs.rs"]
mod runs;

#[path = "docker/failures.rs"]
mod failures;

#[path = "docker/cleanup.rs"]
mod cleanup;

#[path = "docker/images.rs"]
mod images;

#[path = "docker/privileges.rs"]
mod privileges;

#[path = "docker/lab.rs"]
mod lab;

#[path = "docker/lab_clients.rs"]
mod lab_clients;

#[path = "docker/lab_frozen.rs"]
mod lab_frozen;

#[path = "docker/custom_server.rs"]
mod custom_server;

#[path = "docker/explain.rs"]
mod explain;
