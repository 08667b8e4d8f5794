//! echolab's shared vocabulary, at the bottom of the dependency graph.
//!
//! - [`limits`]: the range of every numeric input (rates, durations, counts, sizes), for the
//!   binaries' flags and the experiment and profile checks alike.
//! - [`units`]: durations (`"250us"`, `"5ms"`), bit rates (`"100mbit"`), loss (`"0.1%"`) and
//!   byte sizes (`"4KiB"`), parsed with errors that name the bad value.
//! - [`stats`]: the JSON contracts between the binaries and the launcher: `ServerStats`
//!   (printed by `echo-server`) and `BenchReport` (printed by `echo-bench --json`).
//! - [`experiment`]: experiment files (the seed experiments as data) and their cells.
//! - [`results`]: the results directory: manifest, one run record per cell and repetition.
//! - [`hist`]: latency histograms (HdrHistogram V2, base64) and their percentile summaries.
//! - [`launcher`]: which launcher process owns a run, and whether it is still alive.
//! - [`profile`]: link profiles (`netem/*.yaml`); [`calibration`]: measured RTT and goodput
//!   judged against a profile; [`inputs`]: how a NAME-or-PATH argument becomes a file.
//! - [`cli`]: a command-line usage error folded into the one line the binaries print, and the
//!   usage-error exit status all of them use.
//! - [`shard`]: one echo-bench run split over processes or client machines, and the merge
//!   of their reports.
//! - [`cmd`]: the binaries' command lines as typed builders, and their readiness lines and
//!   JSON outputs as types with parsers.
//! - [`lab_file`]: the lab file of a run across machines (`--lab`): its engines and roles;
//!   [`lab_plan`]: the hosts, networks and engines a run needs, with the rules that join its
//!   inputs; [`link_queue`]: the link's queue limit sized for the experiment it carries.
//! - [`netstat`]: the kernel's TCP counters (`/proc/net/netstat`, `/proc/net/snmp`) and
//!   their deltas.
//! - [`protocol`]: the echo protocol's request and reply; [`quiet`]: when a host counts as
//!   quiet enough to measure on.

pub mod calibration;
pub mod cli;
pub mod cmd;
pub mod experiment;
pub mod hist;
pub mod inputs;
pub mod lab_file;
pub mod lab_plan;
pub mod launcher;
pub mod limits;
pub mod link_counters;
pub mod link_queue;
pub mod netstat;
pub mod results;
pub mod shard;
pub mod stats;
pub mod units;

/// Current wall-clock time as an RFC 3339 UTC timestamp with microsecond precision,
/// e.g. `2026-11-30T01:57:37.123456Z`, the form used by every `started_at` field.
pub fn utc_now_rfc3339() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

pub mod profile;
pub mod protocol;
pub mod quiet;
