//! "Why results may differ from the seed": a short section written from what this run
//! measured — the setting against the seed's ([`crate::setting`]), the cores client and server
//! shared, the calibrated path, the server's own counters, and the flags the other checks
//! raised (client-bound cells, noisy cells, failures).

use echolab_core::results::Manifest;

use crate::claims::measured_rtt_us;
use crate::dataset::Dataset;
use crate::format;
use crate::setting;

/// What echo-bench chose where the experiment left it open (worker threads, source
/// addresses), as it reported in each run, each distinct choice once: these change what the
/// client's kernel does, so the report says them. `None` for records older than the fields.
pub(crate) fn client_choices(ds: &Dataset<'_>) -> Option<String> {
    let mut threads = std::collections::BTreeSet::new();
    let mut sources = std::collections::BTreeSet::new();
    for b in ds
        .cells
        .iter()
        .flat_map(|c| c.ok_runs())
        .filter_map(|r| r.bench.as_ref())
    {
        if !b.threads_reason.is_empty() {
            threads.insert(format!("{} ({})", b.threads, b.threads_reason));
        }
        if !b.source_addrs_reason.is_empty() {
            sources.insert(b.source_addrs_reason.clone());
        }
    }
    if threads.is_empty() && sources.is_empty() {
        return None;
    }
    let list =
        |set: std::collections::BTreeSet<String>| set.into_iter().collect::<Vec<_>>().join("; ");
    Some(format!(
        "Client: echo-bench worker threads {}; source addresses: {}.",
        list(threads),
        list(sources)
    ))
}

/// A short/long cell measured for less than this (median over repetitions, seconds) is too
/// short to be stable: start-up and scheduling take a share of it that varies from run to run.
pub const SHORT_CELL_S: f64 = 0.1;

/// The section's bullets (empty when there is nothing to say).
pub fn bullets(
    ds: &Dataset<'_>,
    manifest: &Manifest,
    noisy: &[String],
    client_bound: &[String],
) -> Vec<String> {
    let e = &manifest.experiment;
    let mut out = Vec::new();
    let mut metrics: Vec<&str> = e
        .reference
        .claims
        .iter()
        .map(|c| c.metric.as_str())
        .collect();
    metrics.extend(
        e.reference
            .figures
            .iter()
            .flat_map(|f| f.values.keys().map(String::as_str)),
    );
    metrics.sort_unstable();
    metrics.dedup();
    if let Some(c) = setting::compare(manifest, e.reference.setup.as_ref(), &metrics) {
        out.push(format!("Setting: this run {}.", c.sentence()));
    }
    let topology = manifest.profile.profile.topology.name();
    let cpus = manifest.environment.cpus;
    let pinned = manifest
        .cpu_plan
        .as_ref()
        .and_then(|p| Some((p.server.as_ref()?, p.client.as_ref()?, p)));
    let machines = manifest
        .cpu_plan
        .as_ref()
        .filter(|p| p.mode == echolab_core::results::CpuPlanRecord::MACHINES);
    if let Some(plan) = machines {
        out.push(format!(
            "Cores: the server and the client ran on machines of their own ({}), so neither took CPU from the other{}.",
            plan.note,
            e.reference
                .setup
                .as_ref()
                .map(|s| format!("; the seed's machine had {}", s.cores))
                .unwrap_or_default()
        ));
    } else if let Some((server, client, plan)) = pinned {
        out.push(format!(
            "Cores: the server ran on CPU {server} and the client on CPU {client}{} of this machine's {cpus} ({}){}; the \
             kernel's loopback and softirq work still runs on whichever CPU sends the packet.",
            plan.link
                .as_ref()
                .map(|l| format!(", the link on CPU {l}"))
                .unwrap_or_default(),
            plan.note,
            e.reference
                .setup
                .as_ref()
                .map(|s| format!("; the seed's machine had {} and pinned nothing", s.cores))
                .unwrap_or_default()
        ));
    } else if topology == "loopback" {
        out.push(format!(
            "Cores: client and server ran on the same {cpus} logical CPUs{}; a client that needs a core competes with \
             the server for it.",
            e.reference
                .setup
                .as_ref()
                .map(|s| format!(" (the seed's machine had {})", s.cores))
                .unwrap_or_default()
        ));
    } else {
        out.push(format!(
            "Cores: {cpus} logical CPUs on this machine, shared by the client, link and server hosts."
        ));
    }
    if let Some(rtt) = measured_rtt_us(manifest) {
        out.push(format!(
            "Path: the calibration measured a median RTT of {} µs; a short-connection request pays about 2 RTTs \
             ({} µs) on the path before any server work, a long-connection request 1.",
            format::num(rtt),
            format::num(2.0 * rtt)
        ));
    }
    let counters: Vec<String> = ds
        .cells
        .iter()
        .filter_map(|c| {
            let runs: Vec<_> = c
                .ok_runs()
                .filter_map(|r| Some((r.server.as_ref()?, r.bench.as_ref()?)))
                .collect();
            let requests: u64 = runs.iter().map(|(_, b)| b.requests_ok).sum();
            if runs.is_empty() || requests == 0 {
                return None;
            }
            let waits: u64 = runs
                .iter()
                .map(|(s, _)| {
                    s.totals
                        .syscalls
                        .iter()
                        .filter(|(n, _)| matches!(n.as_str(), "epoll_wait" | "select" | "poll" | "io_uring_enter"))
                        .map(|(_, st)| st.count)
                        .sum::<u64>()
                })
                .sum();
            let events: u64 = runs.iter().map(|(s, _)| s.totals.events_returned).sum();
            let empty: u64 = runs.iter().map(|(s, _)| s.totals.empty_wakeups).sum();
            let eagain: u64 = runs.iter().map(|(s, _)| s.totals.eagain_read).sum();
            (waits > 0).then(|| {
                format!(
                    "{}: {:.2} waits and {:.2} events per request, {} empty wake-ups, {} reads that found nothing (EAGAIN)",
                    c.id,
                    waits as f64 / requests as f64,
                    events as f64 / requests as f64,
                    empty,
                    eagain
                )
            })
        })
        .collect();
    if !counters.is_empty() {
        out.push(format!(
            "Server counters (all usable repetitions): {}.",
            counters.join("; ")
        ));
    }
    if let Some(client) = client_choices(ds) {
        out.push(client);
    }
    if let Some(busy) = busy_machine(ds) {
        out.push(busy);
    }
    if !client_bound.is_empty() {
        out.push(format!(
            "Client-bound cells (Little's law off by more than 10%): {}; there the client, not the server, set the pace.",
            client_bound.join(", ")
        ));
    }
    let short: Vec<String> = ds
        .cells
        .iter()
        .filter(|c| c.sends_requests())
        .filter_map(|c| {
            let d = crate::inference::Summary::of(
                &c.ok_runs()
                    .filter_map(|r| r.bench.as_ref().map(|b| b.duration_s))
                    .collect::<Vec<_>>(),
            )?;
            (d.median < SHORT_CELL_S)
                .then(|| format!("{} ({} s)", c.id, crate::format::num(d.median)))
        })
        .collect();
    if !short.is_empty() || (!client_bound.is_empty() && manifest.experiment.window.is_none()) {
        out.push(format!(
            "⚠ Cells too short to be stable: {}. A cell bounded by CONNS × ROUNDS lasts as long as those requests take (milliseconds for long connections), which start-up and scheduling dominate; set the experiment's `window:` (e.g. `window: 1s`, with `warmup: 500ms`) to measure every short/long cell for a fixed time.",
            if short.is_empty() {
                format!("{} (client-bound by Little's law)", client_bound.join(", "))
            } else {
                short.join(", ")
            }
        ));
    }
    if !noisy.is_empty() {
        out.push(format!(
            "Noisy figures (CV above 10%): {}; their intervals are wide and their verdicts weaker.",
            noisy.join(", ")
        ));
    }
    let failing: Vec<String> = ds
        .cells
        .iter()
        .filter_map(|c| {
            let text = crate::tables::failures_by_kind(c);
            (text != "0").then(|| format!("{} ({text})", c.id))
        })
        .collect();
    if !failing.is_empty() {
        out.push(format!("Failed requests: {}.", failing.join("; ")));
    }
    out
}

/// One sentence on the usable runs that started on a busy machine (their cell's fresh hosts
/// were made, but other processes kept the CPUs busy for the whole bounded wait), or `None`.
pub fn busy_machine(ds: &Dataset<'_>) -> Option<String> {
    let mut total = 0;
    let mut cells = Vec::new();
    let mut worst: f64 = 0.0;
    for c in &ds.cells {
        let busy: Vec<_> = c
            .ok_runs()
            .filter_map(|r| r.settle.filter(|s| !s.quiet))
            .collect();
        if !busy.is_empty() {
            total += busy.len();
            worst = busy.iter().map(|s| s.last_busy).fold(worst, f64::max);
            cells.push(format!(
                "{} ({} of {})",
                c.id,
                busy.len(),
                c.ok_runs().count()
            ));
        }
    }
    (total > 0).then(|| {
        format!(
            "⚠ Busy machine: {total} runs started while other processes kept the CPUs busy (up to {:.0}% of all CPUs \
             after the launcher's bounded wait for quiet): {}. Their figures measure that contention too; rerun on an \
             idle machine before trusting these verdicts.",
            worst * 100.0,
            cells.join(", ")
        )
    })
}

/// The section in Markdown (heading included), empty when there are no bullets.
pub fn section(
    ds: &Dataset<'_>,
    manifest: &Manifest,
    noisy: &[String],
    client_bound: &[String],
) -> String {
    let b = bullets(ds, manifest, noisy, client_bound);
    if b.is_empty() {
        return String::new();
    }
    let title = if manifest.experiment.reference.source.is_empty() {
        "Why results may differ from another run"
    } else {
        "Why results may differ from the seed"
    };
    format!(
        "## {title}\n\nFrom what this run measured:\n\n{}\n\n",
        b.iter()
            .map(|l| format!("- {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}
