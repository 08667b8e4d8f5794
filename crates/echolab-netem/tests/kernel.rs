//! The kernel backend live: install lan100, and a profile that sets every field netem is given,
//! on the link namespace's devices, read them back, remove them. That needs sch_netem, which many VM and container kernels lack (the development
//! machine's among them), so the live test is ignored by default and the runner reports it as
//! skipped; on a kernel with sch_netem, run it with
//! `cargo nextest run -p echolab-netem --test kernel --run-ignored all`, where a missing
//! sch_netem is a failure; `scripts/kernel-vm` gives a kernel that has it.

use std::time::Duration;

use echolab_core::profile::{JitterDistribution, LinkSpec, Profile};
use echolab_core::units::{BitRate, Dur, Percent};
use echolab_netem::kernel;
use echolab_netem::testbed::{Testbed, LINK_CLIENT_SIDE, LINK_SERVER_SIDE};

/// Fails the test, with the probe's reason, on a kernel without sch_netem: the live tests are
/// ignored by default and run where it is (`--run-ignored all`), where its absence is an error.
fn needs_netem() {
    let p = kernel::probe();
    assert!(
        p.has_netem,
        "this test needs a kernel with sch_netem: {}",
        p.reason
    );
}

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
    needs_netem();
    let tb = Testbed::new().expect("namespaces");
    let profile =
        Profile::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../netem/lan100.yaml").as_ref())
            .unwrap();
    let up = profile.uplink.clone().unwrap();
    let down = profile.downlink.clone().unwrap();
    // lan100 sets no limit: the launcher sizes it per experiment, and alone it is netem's
    // default for that link.
    let limit = up.effective_limit();
    let result = tb
        .in_netns(&tb.lnk, move || -> Result<(), String> {
            for _ in 0..2 {
                // Twice: replace must be idempotent.
                let a =
                    kernel::apply(LINK_SERVER_SIDE, "uplink", &up).map_err(|e| e.to_string())?;
                let nb = a.read_back.netem.clone().ok_or("no netem read back")?;
                if nb.limit != limit || nb.rate_bits_per_s != Some(100_000_000) {
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

/// Two directions that differ in every field netem is given: delay, jitter (normal table one
/// way, uniform the other), loss, rate (one above netem's 32-bit byte rate, so sent as
/// `TCA_NETEM_RATE64`), per-packet overhead and limit.
fn every_field() -> [(&'static str, &'static str, LinkSpec); 2] {
    let up = LinkSpec {
        delay: Dur(Duration::from_millis(20)),
        jitter: Dur(Duration::from_millis(5)),
        distribution: JitterDistribution::Normal,
        loss: Percent(1.5),
        rate: Some(BitRate(50_000_000)),
        overhead: 38,
        limit: Some(500),
        ..LinkSpec::default()
    };
    let down = LinkSpec {
        delay: Dur(Duration::from_micros(7_250)),
        jitter: Dur(Duration::from_micros(1_500)),
        distribution: JitterDistribution::Uniform,
        loss: Percent(0.25),
        rate: Some(BitRate(40_000_000_000)),
        overhead: 0,
        limit: Some(3000),
        ..LinkSpec::default()
    };
    [
        (LINK_SERVER_SIDE, "uplink", up),
        (LINK_CLIENT_SIDE, "downlink", down),
    ]
}

/// The value after `key` in `tc qdisc show`'s line, e.g. `delay` in
/// `qdisc netem 8001: root refcnt 2 limit 500 delay 20ms  5ms loss 1.5% rate 50Mbit`.
fn tc_field<'a>(line: &'a str, key: &str, nth: usize) -> Option<&'a str> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == key)?;
    words.get(at + 1 + nth).copied()
}

/// A number with one of the given unit suffixes, scaled by the unit's factor.
fn tc_number(text: &str, units: &[(&str, f64)]) -> Option<f64> {
    units.iter().find_map(|(suffix, factor)| {
        let n = text.strip_suffix(suffix)?;
        n.parse::<f64>().ok().map(|v| v * factor)
    })
}

/// tc's time in µs (iproute2 prints three significant digits: `20ms`, `1.5ms`, `250us`).
fn tc_time_us(text: &str) -> Option<f64> {
    tc_number(text, &[("ms", 1e3), ("us", 1.0), ("ns", 1e-3), ("s", 1e6)])
}

fn tc_rate_bits(text: &str) -> Option<f64> {
    tc_number(
        text,
        &[("Gbit", 1e9), ("Mbit", 1e6), ("Kbit", 1e3), ("bit", 1.0)],
    )
}

fn close(got: f64, want: f64, relative: f64) -> bool {
    (got - want).abs() <= want.abs() * relative
}

#[test]
#[ignore = "needs sch_netem (`modprobe sch_netem`); run with `cargo nextest run -p echolab-netem --test kernel --run-ignored all`"]
fn kernel_netem_delay_jitter_loss_rate_limit_per_direction() {
    needs_netem();
    let tb = Testbed::new().expect("namespaces");
    let installed = tb
        .in_netns(&tb.lnk, || {
            every_field()
                .map(|(dev, dir, spec)| kernel::apply(dev, dir, &spec).map_err(|e| e.to_string()))
        })
        .expect("enter link namespace");
    // Every field as the kernel reports it (decoded from its dump), against the spec's own
    // units: a netem time in psched ticks of 64 ns may read back up to one tick short.
    let tick_us = 0.064;
    for ((dev, dir, spec), got) in every_field().iter().zip(installed) {
        let got = got.unwrap_or_else(|e| panic!("{dir} on {dev}: {e}"));
        let nb = got
            .read_back
            .netem
            .unwrap_or_else(|| panic!("{dev}: root qdisc is {:?}", got.read_back.kind));
        let want_delay = spec.delay.0.as_secs_f64() * 1e6;
        let want_jitter = spec.jitter.0.as_secs_f64() * 1e6;
        assert!(
            nb.delay_us <= want_delay && nb.delay_us >= want_delay - tick_us,
            "{dev}: delay {} us, asked {want_delay}",
            nb.delay_us
        );
        assert!(
            nb.jitter_us <= want_jitter && nb.jitter_us >= want_jitter - tick_us,
            "{dev}: jitter {} us, asked {want_jitter}",
            nb.jitter_us
        );
        assert!(
            (nb.loss_percent - spec.loss.0).abs() < 1e-6,
            "{dev}: loss {}%, asked {}%",
            nb.loss_percent,
            spec.loss.0
        );
        assert_eq!(Some(nb.limit), spec.limit, "{dev}: limit");
        assert_eq!(nb.rate_bits_per_s, spec.rate.map(|r| r.0), "{dev}: rate");
        let want_overhead = if spec.overhead > 0 {
            spec.overhead as i32 - 14
        } else {
            0
        };
        assert_eq!(
            nb.packet_overhead, want_overhead,
            "{dev}: per-packet overhead (stated per IP packet, less the Ethernet header)"
        );

        // The same qdisc as iproute2's tc shows it: a reader that shares nothing with ours.
        let out = Testbed::output_within(
            {
                let mut c = tb.command(&tb.lnk, "tc".as_ref());
                c.args(["qdisc", "show", "dev", dev]);
                c
            },
            Duration::from_secs(30),
        )
        .expect("tc finishes");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "tc: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = text
            .lines()
            .find(|l| l.contains(" root "))
            .unwrap_or_else(|| panic!("{dev}: tc shows no root qdisc: {text}"));
        println!("{dir} on {dev}: {line}");
        let field = |key: &str, nth: usize| {
            tc_field(line, key, nth).unwrap_or_else(|| panic!("{dev}: no {key} in {line:?}"))
        };
        assert_eq!(field("qdisc", 0), "netem", "{line}");
        assert_eq!(field("limit", 0), spec.limit.unwrap().to_string(), "{line}");
        let delay = tc_time_us(field("delay", 0)).expect("tc's delay");
        let jitter = tc_time_us(field("delay", 1)).expect("tc's jitter");
        assert!(
            close(delay, want_delay, 0.01),
            "{dev}: tc delay {delay} us: {line}"
        );
        assert!(
            close(jitter, want_jitter, 0.01),
            "{dev}: tc jitter {jitter} us: {line}"
        );
        let loss: f64 = field("loss", 0)
            .strip_suffix('%')
            .and_then(|l| l.parse().ok())
            .expect("tc's loss");
        assert!(
            close(loss, spec.loss.0, 0.01),
            "{dev}: tc loss {loss}%: {line}"
        );
        let rate = tc_rate_bits(field("rate", 0)).expect("tc's rate");
        assert!(
            close(rate, spec.rate.unwrap().0 as f64, 0.01),
            "{dev}: tc rate {rate} bit/s: {line}"
        );
        if want_overhead != 0 {
            assert_eq!(
                field("packetoverhead", 0),
                want_overhead.to_string(),
                "{line}"
            );
        } else {
            assert!(!line.contains("packetoverhead"), "{line}");
        }
    }

    let cleared = tb
        .in_netns(&tb.lnk, || {
            every_field().map(|(dev, _, _)| {
                let removed = kernel::clear(dev).map_err(|e| e.to_string())?;
                let after = kernel::show(dev).map(|q| q.kind).unwrap_or_default();
                Ok::<_, String>((removed, after))
            })
        })
        .expect("enter link namespace");
    for ((dev, _, _), c) in every_field().iter().zip(cleared) {
        let (removed, after) = c.unwrap_or_else(|e| panic!("{dev}: {e}"));
        assert!(removed, "{dev}: nothing removed");
        assert_ne!(after, "netem", "{dev}: netem still installed");
    }
}

/// netem's counters over netlink (`TCA_STATS2`): 200 datagrams through a qdisc that drops half
/// at random are counted as sent or dropped, and nothing else is.
#[test]
#[ignore = "needs sch_netem (`modprobe sch_netem`); run with `cargo nextest run -p echolab-netem --test kernel --run-ignored all`"]
fn kernel_netem_counts_what_it_sends_and_drops() {
    needs_netem();
    let tb = Testbed::new().expect("namespaces");
    // The server's MAC as a permanent neighbour of the link side, so that no ARP exchange
    // goes through the lossy qdisc (and no datagram waits for one).
    let out = Testbed::output_within(
        {
            let mut c = std::process::Command::new("ip");
            c.args(["-n", &tb.srv, "link", "show", "eth0"]);
            c
        },
        Duration::from_secs(10),
    )
    .expect("ip link show");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mac = tb_field(&text, "link/ether").expect("the server's MAC");
    let neigh = std::process::Command::new("ip")
        .args([
            "-n",
            &tb.lnk,
            "neigh",
            "replace",
            "10.201.2.2",
            "lladdr",
            mac,
        ])
        .args(["dev", LINK_SERVER_SIDE, "nud", "permanent"])
        .status()
        .expect("ip neigh");
    assert!(neigh.success());
    let half_lost = LinkSpec {
        loss: Percent(50.0),
        limit: Some(1000),
        ..LinkSpec::default()
    };
    let (before, after) = tb
        .in_netns(&tb.lnk, move || -> Result<_, String> {
            kernel::apply(LINK_SERVER_SIDE, "uplink", &half_lost).map_err(|e| e.to_string())?;
            let read = || -> Result<_, String> {
                let q = kernel::show(LINK_SERVER_SIDE).map_err(|e| e.to_string())?;
                let stats = q
                    .stats
                    .ok_or_else(|| "the kernel sent no TCA_STATS2".to_string())?;
                Ok((q.handle, stats))
            };
            let before = read()?;
            let sock = std::net::UdpSocket::bind("10.201.2.1:0").map_err(|e| e.to_string())?;
            for i in 0..200u32 {
                sock.send_to(&i.to_be_bytes(), "10.201.2.2:9")
                    .map_err(|e| e.to_string())?;
            }
            let after = read()?;
            // A root qdisc made again (cleared, then applied) is a new qdisc: its counters
            // start over and the kernel gives it a new handle, which is how the launcher's
            // deltas tell a replaced qdisc from a wrapped counter.
            kernel::clear(LINK_SERVER_SIDE).map_err(|e| e.to_string())?;
            kernel::apply(LINK_SERVER_SIDE, "uplink", &half_lost).map_err(|e| e.to_string())?;
            let again = read()?;
            kernel::clear(LINK_SERVER_SIDE).map_err(|e| e.to_string())?;
            if again.0 == after.0 {
                return Err(format!("a re-made root qdisc kept handle {:#x}", again.0));
            }
            Ok((before, after))
        })
        .expect("enter link namespace")
        .unwrap();
    // One qdisc read twice: the same handle, so the difference of its counters is a count.
    assert_eq!(before.0, after.0, "the root qdisc's handle");
    let d = before.1.delta(&after.1);
    println!("netem counters over 200 datagrams: {d:?}");
    assert!(d.packets > 0 && d.drops > 0, "{d:?}");
    // Each datagram is counted once, as sent or as dropped (a few more packets, e.g. IPv6
    // neighbour discovery on the new link, may pass too).
    let counted = d.packets + u64::from(d.drops);
    assert!((200..=210).contains(&counted), "{d:?}");
    // Each datagram is a 46-byte frame (Ethernet 14 + IP 20 + UDP 8 + 4 bytes of payload; a
    // veth pads nothing); an ARP frame that may pass too is 42: every sent packet's bytes are
    // counted, and nothing else's.
    assert!(
        d.bytes >= d.packets * 42 && d.bytes <= d.packets * 46 + 200,
        "{d:?}"
    );
}

/// The word after `key` in `text` (`ip link show`'s `link/ether 02:..`).
fn tb_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let mut words = text.split_whitespace();
    words.find(|w| *w == key)?;
    words.next()
}
