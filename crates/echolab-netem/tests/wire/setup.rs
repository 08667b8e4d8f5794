//! Refusals before the wire runs and the testbed's own housekeeping: bad profiles and a
//! read-only /proc/sys are named errors, and a new testbed removes what a killed test left.

use std::path::Path;
use std::process::Command;

use echolab_netem::testbed::{Testbed, LINK_CLIENT_SIDE, LINK_SERVER_SIDE};
use echolab_testkit::TempDir;

use super::common::*;

#[test]
fn a_new_testbed_deletes_the_namespaces_a_killed_test_left() {
    // A process that made a namespace in the testbed's naming and was killed before its Drop.
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let orphan = format!("elab-{dead}-0-lnk");
    let out = Command::new("ip")
        .args(["netns", "add", &orphan])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed = || {
        let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.split_whitespace().next() == Some(orphan.as_str()))
    };
    // (Another test's testbed, starting meanwhile, may sweep it first: the end state is the
    // same.)
    let tb = Testbed::new().expect("namespaces");
    assert!(!listed(), "{orphan} still there");
    // Its own namespaces are kept while it lives.
    assert!(Path::new("/run/netns").join(&tb.lnk).exists());
}

#[test]
fn bad_profiles_give_named_errors_and_exit_2() {
    let dir = TempDir::new("netem-wire");
    let cases = [
        (
            "uplink: { delay: 10 parsecs }",
            "uplink.delay",
            "10 parsecs",
        ),
        ("uplink: { delay: 1ms, jiter: 1ms }", "jiter", "uplink"),
        (
            "uplink: { rate: 100 furlongs }",
            "uplink.rate",
            "100 furlongs",
        ),
        ("uplink: { loss: 10 }", "uplink.loss", "10"),
        (
            "uplink: { rate: 1gbit, delay: 100ms, limit: 10 }",
            "uplink.limit",
            "10 packets",
        ),
    ];
    for (i, (uplink, field, value)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.yaml"));
        std::fs::write(
            &path,
            format!("name: bad\ndescription: d\nsource: s\ntopology: link\n{uplink}\ndownlink: {{}}\nexpected:\n  rtt: {{ value: 0s, minus: 0s, plus: 1s }}\n"),
        )
        .unwrap();
        let out = Command::new(BIN)
            .args([
                "wire",
                "--profile",
                path.to_str().unwrap(),
                "--client-side",
                "x",
                "--server-side",
                "y",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{uplink}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(field) && err.contains(value) && err.contains(path.to_str().unwrap()),
            "{uplink}: {err}"
        );
    }
}

#[test]
fn wire_names_the_missing_sysctl_when_proc_sys_is_read_only() {
    let tb = Testbed::new().expect("namespaces");
    tb.sysctl(&tb.lnk, "net.ipv4.ip_forward", "0").unwrap();
    // As in a container: /proc/sys read-only in the wire's own mount namespace.
    let script = format!(
        "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec {BIN} wire --profile {} --client-side {LINK_CLIENT_SIDE} --server-side {LINK_SERVER_SIDE}",
        profile_dir().join("crossnet.yaml").display()
    );
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns", "exec", &tb.lnk, "unshare", "--mount", "sh", "-c", &script,
    ]);
    let out = Testbed::output_within(cmd, DEADLINE).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("net.ipv4.ip_forward") && err.contains("--sysctl"),
        "{err}"
    );
}
