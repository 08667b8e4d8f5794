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
    let topology = manifest.profile.profile.topology.name();
    let profile = manifest.profile.profile.name.as_str();
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
    if let Some(plan) = manifest.cpu_plan.as_ref().filter(|p| p.server.is_some()) {
        let how = if plan.shared_by_server_and_client().is_empty() {
            "disjoint CPUs"
        } else {
            "overlapping CPUs"
        };
        differences.push(format!(
            "server and client pinned to {how} here ({} and {}), unpinned in the seed",
            plan.server.as_deref().unwrap_or("?"),
            plan.client.as_deref().unwrap_or("?")
        ));
    }
    if let Some(window) = manifest.experiment.window {
        differences.push(format!(
            "short/long cells measured over {window} windows here, over CONNS × ROUNDS requests in the seed \
             (`--as-published` runs those)"
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

/// A setting in which a run can differ from the seed's, as the table "Setting: seed vs
/// here" lists them and `echolab-up --explain` varies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// Where client and server run: one machine's loopback, or two hosts across a link.
    Topology,
    /// Logical CPUs of the machine.
    Cores,
    /// Whether server and client are pinned to CPUs of their own.
    CpuPlan,
    /// The client: echo-bench's event engine or one blocking thread per connection.
    Client,
    /// What a cell measures: a timed window, or CONNS × ROUNDS requests.
    Measure,
    /// Fresh client and server hosts for every cell, or the same ones for consecutive runs.
    Hosts,
    /// The kernel release.
    Kernel,
}

impl Setting {
    /// Every setting, in table order.
    pub const ALL: [Setting; 7] = [
        Setting::Topology,
        Setting::Cores,
        Setting::CpuPlan,
        Setting::Client,
        Setting::Measure,
        Setting::Hosts,
        Setting::Kernel,
    ];

    /// The name the table and `--explain` print.
    pub fn name(self) -> &'static str {
        match self {
            Setting::Topology => "topology",
            Setting::Cores => "logical CPUs",
            Setting::CpuPlan => "CPU plan",
            Setting::Client => "client",
            Setting::Measure => "cell measures",
            Setting::Hosts => "hosts",
            Setting::Kernel => "kernel",
        }
    }

    /// How `echolab-up` runs this setting as the seed had it, or why it cannot on this
    /// machine: a setting of the machine itself (its kernel, its CPUs, one machine's
    /// loopback) is not a flag.
    pub fn as_seed(self) -> Result<&'static str, &'static str> {
        match self {
            Setting::CpuPlan => Ok("--cpu-plan shared"),
            Setting::Client => Ok("bench.engine: thread"),
            Setting::Measure => Ok("--as-published"),
            Setting::Hosts => Ok("--reuse-hosts"),
            Setting::Cores => Err("a machine with the seed's CPU count"),
            Setting::Kernel => Err("a machine booted with the seed's kernel"),
            Setting::Topology => Err("the seed's profile (--profile)"),
        }
    }
}

/// One row of the table "Setting: seed vs here".
#[derive(Debug, Clone, PartialEq)]
pub struct SettingRow {
    /// Which setting.
    pub setting: Setting,
    /// As the seed had it.
    pub seed: String,
    /// As this run had it.
    pub here: String,
    /// Whether they differ.
    pub differs: bool,
}

/// This run's settings against the seed's, one row per [`Setting`]; empty when the
/// experiment states no seed setup.
pub fn rows(manifest: &Manifest) -> Vec<SettingRow> {
    let Some(seed) = manifest.experiment.reference.setup.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut row = |setting, seed: String, here: String| {
        let differs = seed != here;
        out.push(SettingRow {
            setting,
            seed,
            here,
            differs,
        });
    };
    row(
        Setting::Topology,
        seed.topology.clone(),
        manifest.profile.profile.topology.name().to_string(),
    );
    row(
        Setting::Cores,
        seed.cores.to_string(),
        manifest.environment.cpus.to_string(),
    );
    let plan = manifest.cpu_plan.as_ref().filter(|p| p.server.is_some());
    row(
        Setting::CpuPlan,
        "unpinned".into(),
        plan.map_or("unpinned".into(), |p| {
            format!(
                "server on {}, client on {}",
                p.server.as_deref().unwrap_or("?"),
                p.client.as_deref().unwrap_or("all CPUs")
            )
        }),
    );
    let engine = |e: echolab_core::cmd::BenchEngine| match e {
        echolab_core::cmd::BenchEngine::Thread => "one thread per connection".to_string(),
        echolab_core::cmd::BenchEngine::Uring => "ring engine (io_uring workers)".to_string(),
        echolab_core::cmd::BenchEngine::Event => "event engine (epoll workers)".to_string(),
    };
    if let Some(client) = seed.client {
        row(
            Setting::Client,
            engine(client),
            engine(manifest.experiment.bench.engine),
        );
    }
    row(
        Setting::Measure,
        "CONNS × ROUNDS requests".into(),
        manifest
            .experiment
            .window
            .map_or("CONNS × ROUNDS requests".into(), |w| {
                format!("a {w} window")
            }),
    );
    let fresh = manifest
        .order
        .as_ref()
        .is_some_and(|o| o.fresh_hosts_per_cell);
    row(
        Setting::Hosts,
        "one machine, runs back to back".into(),
        if fresh {
            "fresh hosts for every cell".into()
        } else {
            "one machine, runs back to back".into()
        },
    );
    row(
        Setting::Kernel,
        seed.kernel.clone(),
        major_minor(&manifest.environment.kernel),
    );
    out
}

/// The table "Setting: seed vs here", once per report, with what `--explain` can vary.
pub fn table(manifest: &Manifest) -> String {
    let rows = rows(manifest);
    if rows.is_empty() {
        return String::new();
    }
    let mut t =
        crate::format::Table::new(["Setting", "Seed", "Here", "Differs", "Run as the seed's"]);
    for r in &rows {
        t.row([
            r.setting.name().to_string(),
            r.seed.clone(),
            r.here.clone(),
            if r.differs { "yes" } else { "no" }.to_string(),
            match r.setting.as_seed() {
                _ if !r.differs => "—".to_string(),
                Ok(how) => format!("`{how}` (`echolab-up --explain`)"),
                Err(needs) => format!("not on this machine: needs {needs}"),
            },
        ]);
    }
    format!(
        "### Setting: seed vs here

{}
",
        t.to_markdown()
    )
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

    #[test]
    fn pinned_cpus_and_a_measurement_window_are_differences_from_the_seed() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../experiments/exp31.yaml"
        ))
        .unwrap();
        let exp = echolab_core::experiment::Experiment::parse(&text, "exp31.yaml").unwrap();
        let seed = exp
            .reference
            .setup
            .clone()
            .expect("exp31 states the seed's setup");
        let mut m: Manifest = serde_yaml::from_str(&format!(
            "schema: x\nrun_id: r\nstatus: complete\ncreated_at: t\nargs: []\nbackend: docker\nexperiment: {}\nprofile: {{name: loopback, description: d, source: s, topology: loopback, expected: {{rtt: {{value: 0s, minus: 0s, plus: 1ms}}}}}}\ninputs: {{}}\nenvironment: {{kernel: '3.10.0', cpu_model: c, cpus: 4, mem_bytes: 1, docker_version: d, git_rev: g, echolab_version: v}}\nruns_planned: 1\nruns_done: 1\n",
            serde_json::to_string(&exp).unwrap()
        ))
        .unwrap();
        let as_seed = |m: &Manifest| compare(m, Some(&seed), &["qps"]).unwrap().differences;
        // exp31 as shipped measures 1 s windows: that alone differs.
        assert_eq!(
            as_seed(&m),
            ["short/long cells measured over 1s windows here, over CONNS × ROUNDS requests in the seed (`--as-published` runs those)"]
        );
        m.experiment = m.experiment.clone().as_published();
        assert!(as_seed(&m).is_empty(), "{:?}", as_seed(&m));
        m.cpu_plan = Some(echolab_core::results::CpuPlanRecord {
            mode: "auto".into(),
            server: Some("0-1".into()),
            client: Some("2-3".into()),
            machine_cpus: 4,
            ..Default::default()
        });
        assert_eq!(
            as_seed(&m),
            ["server and client pinned to disjoint CPUs here (0-1 and 2-3), unpinned in the seed"]
        );
    }
}
