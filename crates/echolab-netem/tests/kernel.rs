//! The kernel backend live: where the probe finds sch_netem, install lan100 on the link
//! namespace's devices, read it back, remove it. Where it does not, say why and skip.

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
fn kernel_netem_apply_read_back_clear_where_available() {
    let p = kernel::probe();
    if !p.has_netem {
        println!("SKIPPED kernel netem live test: {}", p.reason);
        return;
    }
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
