//! The kernel's TCP counters in the report: a server that cannot take connections must show
//! up as listen-queue overflows and SYN retransmissions in the client's `kernel_counters`,
//! measured in a network namespace of the test's own so that no other test's traffic counts.
//! Needs root (unshare(2) of a network namespace) and `ip` from iproute2, as every namespace
//! test of the workspace does.

mod common;

use echolab_core::stats::BenchReport;
use echolab_testkit::{workspace_bin, ServerProcess};

#[test]
fn a_stopped_backlog_1_server_shows_listen_overflows_and_syn_retransmits() {
    let report = common::in_fresh_netns(|| {
        let server = ServerProcess::spawn(
            &workspace_bin("echo-server"),
            &[
                "--model",
                "epoll-et",
                "--bind",
                "127.0.0.1",
                "--port",
                "0",
                "--backlog",
                "1",
            ],
        );
        let pid = nix::unistd::Pid::from_raw(server.pid() as i32);
        // Stopped, the server accepts nothing: its accept queue (backlog 1) fills at once and
        // every further SYN is dropped, so clients retransmit their SYNs (first after 1 s).
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
        let port = server.addr.port().to_string();
        let (out, _) = common::run(&[
            "127.0.0.1",
            &port,
            "20",
            "1",
            "--mode",
            "short",
            "--timeout",
            "2500ms",
            "--json",
        ]);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
        drop(server);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        serde_json::from_str::<BenchReport>(&stdout)
            .unwrap_or_else(|e| panic!("not a BenchReport ({e}): {stdout}"))
    });
    let k = &report.kernel_counters;
    let get = |name: &str| k.get(name).copied().unwrap_or(0);
    // 20 connects against room for at most 2 (backlog 1 admits backlog + 1): at least 18
    // first SYNs overflow, and each of those is retransmitted at least once within 2.5 s.
    assert!(
        get("TcpExtListenOverflows") >= 18,
        "ListenOverflows {}: {k:?}",
        get("TcpExtListenOverflows")
    );
    assert!(
        get("TcpExtTCPSynRetrans") >= 18,
        "TCPSynRetrans {}: {k:?}",
        get("TcpExtTCPSynRetrans")
    );
    assert_eq!(report.requests_ok, 0, "{:?}", report.failures);
    assert_eq!(report.requests_failed, 20, "{:?}", report.failures);
    assert_eq!(report.load_model, "closed");
}
