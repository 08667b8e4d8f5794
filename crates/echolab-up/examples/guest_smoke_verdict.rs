//! Judges a crossnet smoke run made inside `scripts/kernel-vm`'s guest (QEMU's software
//! emulation of a stock kernel with sch_netem), for `scripts/ci-kernel-netem --smoke`:
//!
//!     cargo run -p echolab-up --example guest_smoke_verdict -- RESULTS_DIR
//!
//! Required in every case: the link backend is kernel netem, and both directions' qdiscs were
//! read back as netem (and, for a `--lab` run across machines, the kernel's masquerade of the
//! client's address in place). A complete run is accepted when every run record holds the qdiscs'
//! counters over its run (packets carried both ways). A run that stopped at calibration
//! is accepted only when every check passed but `rtt_median` (the absolute RTT), with
//! `added_rtt` (the RTT netem adds over the path's own, measured without it) inside its band:
//! the profile's delay was applied right, and what failed is the guest's own base RTT, which
//! software emulation makes hundreds of µs instead of tens. Any other outcome fails. The
//! tolerance itself is never widened: the line printed says what was accepted and why.
//! Exit status: 0 accepted, 1 not, 2 bad usage or an unreadable directory.

use std::process::ExitCode;

use echolab_core::results::{ResultsDir, RunStatus};

fn main() -> ExitCode {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: guest_smoke_verdict RESULTS_DIR");
        return ExitCode::from(2);
    };
    let r = match ResultsDir::load(dir.as_ref()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("guest smoke: {e}");
            return ExitCode::from(2);
        }
    };
    match judge(&r) {
        Ok(line) => {
            println!("guest smoke: accepted: {line}");
            ExitCode::SUCCESS
        }
        Err(line) => {
            println!("guest smoke: FAILED: {line}");
            ExitCode::from(1)
        }
    }
}

fn judge(r: &ResultsDir) -> Result<String, String> {
    let link = &r.manifest.link;
    if link.backend != "kernel-netem" {
        return Err(format!(
            "link backend {:?}, not kernel-netem ({})",
            link.backend, link.reason
        ));
    }
    // Across machines the kernel's masquerade must have translated the client's address.
    let lab = r.manifest.args.iter().any(|a| a == "--lab");
    if lab && !link.reason.contains("masquerade") {
        return Err(format!(
            "a lab run without the kernel's masquerade: {}",
            link.reason
        ));
    }
    let installed = link.installed["installed"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let netem_read_back = installed
        .iter()
        .filter(|i| i["read_back"]["kind"] == "netem")
        .count();
    if netem_read_back != 2 {
        return Err(format!(
            "{netem_read_back} of 2 directions read back as netem: {}",
            link.installed
        ));
    }
    let read_back = format!(
        "backend kernel-netem, both directions read back as netem ({})",
        installed
            .iter()
            .map(|i| format!(
                "{} on {}: delay {} us",
                i["direction"].as_str().unwrap_or("?"),
                i["dev"].as_str().unwrap_or("?"),
                i["read_back"]["netem"]["delay_us"]
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if r.manifest.status == RunStatus::Complete {
        // Every run records what the qdiscs carried and dropped during it.
        let mut packets = 0;
        let mut drops = 0;
        for run in &r.runs {
            let link = run.link.as_ref().filter(|l| l.backend == "kernel-netem");
            let Some(l) = link.filter(|l| l.uplink.packets > 0 && l.downlink.packets > 0) else {
                return Err(format!(
                    "{read_back}; run {} has no kernel-netem qdisc counters: {:?}",
                    run.file_name(),
                    run.link
                ));
            };
            packets += l.uplink.packets + l.downlink.packets;
            drops += l.uplink.drops_qdisc + l.downlink.drops_qdisc;
        }
        return Ok(format!(
            "{read_back}; calibration passed; {} runs complete, each with its qdiscs' counters \
             ({packets} packets, {drops} dropped, over all runs)",
            r.runs.len()
        ));
    }
    let cal = link
        .calibration
        .as_ref()
        .ok_or_else(|| format!("the run stopped before calibration: {:?}", r.manifest.error))?;
    let failed: Vec<&str> = cal
        .checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| c.name.as_str())
        .collect();
    let added = cal.checks.iter().find(|c| c.name == "added_rtt");
    let absolute = cal.checks.iter().find(|c| c.name == "rtt_median");
    match (failed.as_slice(), added, absolute) {
        (["rtt_median"], Some(added), Some(absolute)) if added.pass => Ok(format!(
            "{read_back}; calibration failed on rtt_median alone ({:.0} us against at most {:.0}), \
             while added_rtt, the delay netem adds, passed ({:.0} us within {:.0}-{:.0}): the \
             guest's own base RTT under software emulation is {:.0} us (rtt_baseline_median_us); \
             the cells did not run",
            absolute.measured,
            absolute.high,
            added.measured,
            added.low,
            added.high,
            cal.measured
                .get("rtt_baseline_median_us")
                .copied()
                .unwrap_or(f64::NAN)
        )),
        _ => Err(format!(
            "{read_back}; calibration failed on {failed:?}, which the guest's slowness does not \
             explain: {}",
            cal.reason
        )),
    }
}
