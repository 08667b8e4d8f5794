//! Where a comparison with the seed stands: the differences between this run's setting and
//! the seed's (topology and profile, cores, kernel, how the figure was timed), so that no
//! Here/seed figure or verdict reads as like for like when it is not.
//!
//! This run's side comes from the manifest (profile, `environment.cpus`,
//! `environment.kernel`); the seed's from the experiment's `reference.setup`. How each metric
//! is timed here: latency and QPS by echo-bench's clock per request, `syscall.*` by thin
//! in-process wrappers around each call (`echo-bench --syscalls`), `strace.*` by `strace -c`,
//! CPU and memory by samples of the server host (as top(1) reads them).

use echolab_core::experiment::{SeedSetup, TimingMethod};
use echolab_core::results::Manifest;

use crate::header::profile_field;

/// How this run timed `metric`: a description, and the seed method it is equivalent to
/// (`None`: none is, e.g. in-process wrappers vs ptrace).
pub fn our_timing(metric: &str) -> (&'static str, Option<TimingMethod>) {
    if metric.starts_with("syscall.") {
        ("in-process wrappers around each call", None)
    } else if metric.starts_with("strace.") {
        ("strace -c (ptrace)", Some(TimingMethod::Ptrace))
    } else if matches!(
        metric,
        crate::metrics::CPU_PCT | crate::metrics::MEM_PCT | crate::metrics::MEM_MIB
    ) {
        ("samples of the server host", Some(TimingMethod::Top))
    } else {
        (
            "echo-bench's clock per request",
            Some(TimingMethod::BenchClock),
        )
    }
}

/// `6.18` of `6.18.0-1-amd64`: the part of a kernel version that names its release.
fn major_minor(kernel: &str) -> String {
    kernel
        .split(['.', '-'])
        .take(2)
        .collect::<Vec<_>>()
        .join(".")
}

/// This run's setting against the seed's.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// One phrase per difference, e.g. `cores 2 here, 4 in the seed`; empty when the
    /// settings agree in every field compared.
    pub differences: Vec<String>,
    /// Whether this run ran on the seed's topology (its figures are then like for like as far
    /// as the path goes).
    pub same_topology: bool,
}

impl Comparison {
    /// `has the same topology, cores, kernel and timing method as the seed` or
    /// `differs from the seed: …`, to follow "this run".
    pub fn sentence(&self) -> String {
        if self.differences.is_empty() {
            "has the same topology, cores, kernel and timing method as the seed".into()
        } else {
            format!("differs from the seed: {}", self.differences.join("; "))
        }
    }
}

/// Compares this run's setting with `seed` for `metrics` (their timing methods). `None` when
/// the experiment states no seed setup.
pub fn compare(
    manifest: &Manifest,
    seed: Option<&SeedSetup>,
    metrics: &[&str],
) -> Option<Comparison> {
    let seed = seed?;
    let mut differences = Vec::new();
    let topology = profile_field(manifest, "topology");
    let profile = profile_field(manifest, "name");
    let same_topology = topology == seed.topology;
    if !same_topology {
        differences.push(format!(
            "topology {topology} (profile {profile}) here, {} in the seed (closest profile {})",
            seed.topology, seed.profile
        ));
    } else if profile != seed.profile {
        differences.push(format!(
            "profile {profile} here, closest to the seed is {}",
            seed.profile
        ));
    }
    let cpus = manifest.environment.cpus;
    if cpus != seed.cores {
        differences.push(format!(
            "{cpus} logical CPUs here, {} in the seed",
            seed.cores
        ));
    }
    let kernel = major_minor(&manifest.environment.kernel);
    if kernel != seed.kernel {
        differences.push(format!("kernel {kernel} here, {} in the seed", seed.kernel));
    }
    let mut timings: Vec<&str> = Vec::new();
    for m in metrics {
        let (ours, equivalent) = our_timing(m);
        if equivalent != Some(seed.timing) && !timings.contains(&ours) {
            timings.push(ours);
        }
    }
    if !timings.is_empty() {
        differences.push(format!(
            "timed by {} here, by {} in the seed",
            timings.join(" and "),
            seed.timing.describe()
        ));
    }
    Some(Comparison {
        differences,
        same_topology,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_methods_and_kernels() {
        assert_eq!(our_timing("syscall.close.count").1, None);
        assert_eq!(
            our_timing("strace.close.count").1,
            Some(TimingMethod::Ptrace)
        );
        assert_eq!(our_timing("qps").1, Some(TimingMethod::BenchClock));
        assert_eq!(major_minor("6.18.0-1-amd64"), "6.18");
        assert_eq!(major_minor("3.10"), "3.10");
    }
}
