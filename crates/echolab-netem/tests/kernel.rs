//! The kernel backend live: install lan100 on the link namespace's devices, read it back,
//! remove it. That needs sch_netem, which many VM and container kernels lack (the development
//! machine's among them), so the live test is ignored by default and the runner reports it as
//! skipped; on a kernel with sch_netem, run it with
//! `cargo nextest run -p echolab-netem --test kernel --run-ignored all`, where a missing
//! sch_netem is a failure.

use echolab_core::profile::Profile;
use echolab_netem::kernel;
use echolab_netem::testbed::{Testbed, LINK_CLIENT_SIDE, LINK_SERVER_SIDE};

#[test]
fn probe_gives_an_answer_with_a_reason() {
    let p = kernel::probe();
    println!("probe: {p:?}");
    assert!(!p.reason.is_empty());
    if !p.has_netem {
        assert!(
            p.reason.contains("sch_netem") || p.reason.contains("permission"),
            "{}",
            p.reason
        );
    }
}

#[test]
#[ignore = "needs sch_netem (`modprobe sch_netem`); run with `cargo nextest run -p echolab-netem --test kernel --run-ignored all`"]
fn kernel_netem_apply_read_back_clear() {
    let p = kernel::probe();
    assert!(
        p.has_netem,
        "this test needs a kernel with sch_netem: {}",
        p.reason
    );
    let tb = Testbed::new().expect("namespaces");
    let profile =
        Profile::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../netem/lan100.yaml").as_ref())
            .unwrap();
    let up = profile.uplink.clone().unwrap();
    let down = profile.downlink.clone().unwrap();
    let result = tb
        .in_netns(&tb.lnk, move || -> Result<(), String> {
            for _ in 0..2 {
                // Twice: replace must be idempotent.
                let a =
                    kernel::apply(LINK_SERVER_SIDE, "uplink", &up).map_err(|e| e.to_string())?;
                let nb = a.read_back.netem.clone().ok_or("no netem read back")?;
                if nb.limit != 100 || nb.rate_bits_per_s != Some(100_000_000) {
                    return Err(format!("read back {nb:?}"));
                }
                kernel::apply(LINK_CLIENT_SIDE, "downlink", &down).map_err(|e| e.to_string())?;
            }
            for dev in [LINK_SERVER_SIDE, LINK_CLIENT_SIDE] {
                if !kernel::clear(dev).map_err(|e| e.to_string())? {
                    return Err(format!("{dev}: nothing removed"));
                }
                if kernel::show(dev)
                    .map(|q| q.kind == "netem")
                    .unwrap_or(false)
                {
                    return Err(format!("{dev}: netem still installed"));
                }
            }
            Ok(())
        })
        .expect("enter link namespace");
    result.unwrap();
}
