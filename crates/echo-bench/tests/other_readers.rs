//! A histogram of a real run, decoded by another HdrHistogram library: Python's `hdrhistogram`
//! (PyPI), which reads only the compressed V2 encoding. This is what lets others plot or merge
//! echolab's records without echolab's code.
//!
//! The interpreter is `ECHOLAB_PYTHON` when set, else the virtual environment `scripts/test`
//! makes at `target/python-venv` (a `python3` with `hdrhistogram` installed). When neither
//! exists the test fails, naming both, so that CI never passes without having run it;
//! `ECHOLAB_SKIP_PYTHON_READER=1` skips it on a machine without Python, and says so.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::report;
use echolab_core::hist;
use echolab_testkit::spawn_echo_server;

/// The opt-out: set to 1 to skip this test where Python cannot be had.
const SKIP_VAR: &str = "ECHOLAB_SKIP_PYTHON_READER";
/// A `python3` with `hdrhistogram` installed, overriding the default venv.
const PYTHON_VAR: &str = "ECHOLAB_PYTHON";

/// The interpreter to use, or `None` (after printing why) when the test is opted out.
fn python() -> Option<PathBuf> {
    if std::env::var(SKIP_VAR).is_ok_and(|v| v == "1") {
        eprintln!("{SKIP_VAR}=1: Python's hdrhistogram reader is NOT checked");
        return None;
    }
    let venv =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/python-venv/bin/python3");
    let py = std::env::var_os(PYTHON_VAR).map_or(venv, PathBuf::from);
    assert!(
        py.exists(),
        "no Python for the hdrhistogram reader test at {}: run scripts/test (it makes \
         target/python-venv with PyPI's hdrhistogram), or set {PYTHON_VAR} to a python3 that has \
         it, or set {SKIP_VAR}=1 to skip this test",
        py.display()
    );
    Some(py)
}

/// Decodes base64 `histogram` with Python's `hdrhistogram`: (total count, min, max), values
/// in the histogram's unit (ns).
fn decode_in_python(py: &PathBuf, histogram: &str) -> (u64, u64, u64) {
    const SCRIPT: &str = "import sys\n\
        from hdrh.histogram import HdrHistogram\n\
        h = HdrHistogram.decode(sys.stdin.read().strip())\n\
        print(h.get_total_count(), h.get_min_value(), h.get_max_value())\n";
    let mut child = Command::new(py)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", py.display()));
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(histogram.as_bytes())
        .expect("write the histogram to Python");
    let out = child.wait_with_output().expect("wait for Python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Python's hdrhistogram could not decode the histogram ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let fields: Vec<u64> = stdout
        .split_whitespace()
        .map(|f| {
            f.parse()
                .unwrap_or_else(|e| panic!("{f:?} from Python: {e}"))
        })
        .collect();
    assert_eq!(fields.len(), 3, "Python printed {stdout:?}");
    (fields[0], fields[1], fields[2])
}

#[test]
fn python_hdrhistogram_decodes_a_real_runs_histogram_to_its_request_count() {
    let Some(py) = python() else { return };
    let server = spawn_echo_server("epoll-et", &[]);
    let port = server.addr.port().to_string();
    let r = report(&["127.0.0.1", &port, "20", "50", "--mode", "long"]);
    assert_eq!(r.requests_ok, 20 * 50, "{:?}", r.failures);
    let ours = hist::decode(&r.histogram).expect("our own reader decodes it");
    let (count, min, max) = decode_in_python(&py, &r.histogram);
    assert_eq!(count, r.requests_ok, "Python's total count vs requests_ok");
    // Both libraries report the bucket's equivalent value of the recorded extremes.
    assert_eq!((min, max), (ours.min(), ours.max()));
}
