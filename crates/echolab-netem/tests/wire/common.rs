//! What the wire's tests share: the wire binary and its profiles, starting the wire and the
//! calibration server in a testbed, calibrating through them, and reading the wire's counters.

use std::path::PathBuf;
use std::time::Duration;

use echolab_netem::testbed::{ChildGuard, Testbed, SERVER_ADDR};
use echolab_netem::wire::counters::WireStats;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_echolab-netem");
/// Generous: two cores shared with other builds and tests.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);
pub(crate) const CALIB_PORT: u16 = 7070;

pub(crate) fn profile_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../netem")
}

pub(crate) fn start_wire(tb: &Testbed, profile: &str) -> ChildGuard {
    tb.start_wire(BIN.as_ref(), &profile_dir(), profile, 4, DEADLINE)
        .expect("wire readiness")
}

pub(crate) fn start_calib_server(tb: &Testbed) -> ChildGuard {
    let mut cmd = tb.command(&tb.srv, BIN.as_ref());
    cmd.args(["calib-server", "--port", &CALIB_PORT.to_string()]);
    let mut server = ChildGuard::spawn(cmd).expect("spawn calib-server");
    server
        .wait_for_stderr("calib-server listening on", DEADLINE)
        .expect("calib-server readiness");
    server
}

pub(crate) fn calibrate(tb: &Testbed, profile: &str) -> serde_json::Value {
    let mut cmd = tb.command(&tb.cli, BIN.as_ref());
    cmd.arg("--profile-dir").arg(profile_dir()).args([
        "calibrate",
        "--json",
        "--profile",
        profile,
        "--target",
        &format!("{SERVER_ADDR}:{CALIB_PORT}"),
    ]);
    let out = Testbed::output_within(cmd, DEADLINE).expect("calibrate finishes");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("calibrate {profile}: {stdout}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "calibrate JSON ({e}): {stdout} / {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

pub(crate) fn check<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
}

/// Asks the wire for stats (SIGUSR1) and reads them.
pub(crate) fn wire_stats(wire: &mut ChildGuard) -> WireStats {
    wire.signal(libc::SIGUSR1);
    let line = wire.next_stdout_line(DEADLINE).expect("stats line");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("stats JSON ({e}): {line}"))
}
