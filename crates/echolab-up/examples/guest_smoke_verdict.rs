//! Judges a crossnet smoke run made inside `scripts/kernel-vm`'s guest (QEMU's software
//! emulation of a stock kernel with sch_netem), for `scripts/ci-kernel-netem --smoke`:
//!
//!     cargo run -p echolab-up --example guest_smoke_verdict -- RESULTS_DIR
//!
//! Required in every case: the link backend is kernel netem, and both directions' qdiscs were
//! read back as netem (and, for a `--lab` run across machines, the kernel's masquerade of the
//! client's address in place). A complete run is accepted when every run record holds the qdiscs'
//! counters over its run (packets carried both ways). A run that stopped at calibration
//! is accepted only when every check it failed is a round-trip time (`rtt_median`, `added_rtt`)
//! measured above its band, and the goodput checks (the rate netem enforces) passed: software
//! emulation makes every packet's path slower (the guest's base RTT is hundreds of µs to ms
//! instead of tens, and netem's own timers run late), so an RTT check can only fail from above
//! there; a check failed from below, or any other check failed, is not accepted. Any other outcome fails. The
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
            let Some(l) =
                link.filter(|l| l.uplink.counts.packets > 0 && l.downlink.counts.packets > 0)
            else {
                return Err(format!(
                    "{read_back}; run {} has no kernel-netem qdisc counters: {:?}",
                    run.file_name(),
                    run.link
                ));
            };
            packets += l.uplink.counts.packets + l.downlink.counts.packets;
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
    // The emulator only adds time: an RTT check it fails, it fails from above. The goodput
    // checks (the rate netem enforces) must pass, and every RTT check must be over its band,
    // not under it.
    let rtt_check = |name: &str| name == "rtt_median" || name == "added_rtt";
    let over: Vec<String> = cal
        .checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| {
            format!(
                "{} {:.0} {} above its band's {:.0}",
                c.name, c.measured, c.unit, c.high
            )
        })
        .collect();
    let only_slow = !failed.is_empty()
        && cal
            .checks
            .iter()
            .filter(|c| !c.pass)
            .all(|c| rtt_check(&c.name) && c.measured > c.high);
    if only_slow {
        Ok(format!(
            "{read_back}; calibration failed on round-trip time alone ({}), while the rate netem \
             enforces passed: under QEMU's software emulation every packet's path is slower \
             (timing 10-50x off; the guest's own base RTT here {:.0} us, tens of us on hardware), \
             so an RTT check fails from above; what the guest shows is that the qdiscs are \
             installed and read back; the cells did not run",
            over.join(", "),
            cal.measured
                .get("rtt_baseline_median_us")
                .copied()
                .unwrap_or(f64::NAN)
        ))
    } else {
        Err(format!(
            "{read_back}; calibration failed on {failed:?}, which the guest's slowness does not \
             explain: {}",
            cal.reason
        ))
    }
}
