//! The stats lines: `--stats-interval` lines while the server runs, and the final line on
//! SIGINT (Ctrl-C) as on SIGTERM.

mod common;

use std::time::Duration;

use common::{connect, round_trip, DEADLINE};
use echolab_core::stats::ServerStats;
use echolab_testkit::{spawn_echo_server, ServerProcess};

const HELLO: &[u8] = b"hello echo\r\n";

/// The next `--stats-interval` line, parsed; fails the test when none comes within [`DEADLINE`].
fn next_interval_line(server: &mut ServerProcess) -> ServerStats {
    let line = server.next_stdout_line(DEADLINE).unwrap_or_else(|| {
        panic!(
            "no stats line within {DEADLINE:?}; stderr:\n{}",
            server.stderr()
        )
    });
    let stats: ServerStats =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stats JSON ({e}): {line}"));
    assert!(!stats.is_final, "an interval line is not final: {line}");
    stats
}

#[test]
fn sigint_prints_the_final_stats_line_and_exits_0() {
    let server = spawn_echo_server("epoll-et", &[]);
    {
        let mut s = connect(server.addr);
        for _ in 0..3 {
            assert_eq!(round_trip(&mut s, HELLO).unwrap(), HELLO);
        }
        // The server counts a write after the bytes are on their way, so the client may hold
        // its echo before the count is made. Its EOF comes after: the server closes the
        // connection only once it has counted everything before.
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut rest).unwrap();
        assert!(rest.is_empty());
    }
    let (code, stats, out) = server.stop_with(libc::SIGINT);
    assert_eq!(code, 0, "exit status after SIGINT; stdout:\n{out}");
    // Without --stats-interval the final line is the only one.
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(stats.is_final);
    assert_eq!(stats.model, "epoll-et");
    let t = &stats.totals;
    assert_eq!(
        (t.accepted, t.bytes_in, t.bytes_out),
        (1, 3 * 12, 3 * 12),
        "{stats:?}"
    );
}

#[test]
fn stats_interval_prints_live_counters_at_the_interval() {
    const EVERY_S: f64 = 0.2;
    let mut server = spawn_echo_server("epoll-lt", &["--stats-interval", "200ms"]);
    let first = next_interval_line(&mut server);
    // The reporter sleeps a whole interval before each line, so no line comes early.
    assert!(first.uptime_s >= EVERY_S, "{first:?}");
    assert_eq!(first.totals.accepted, 0, "{first:?}");
    let mut s = connect(server.addr);
    assert_eq!(round_trip(&mut s, HELLO).unwrap(), HELLO);
    // The counters are read when each line is printed: a later line shows the round trip.
    let mut previous = first;
    let seen = loop {
        let line = next_interval_line(&mut server);
        let gap = line.uptime_s - previous.uptime_s;
        // At least one interval apart; a loaded 2-core host may add some scheduling delay.
        assert!(
            (EVERY_S..EVERY_S + 1.0).contains(&gap),
            "lines {gap:.3} s apart: {previous:?} then {line:?}"
        );
        if line.totals.accepted == 1 {
            break line;
        }
        assert!(
            line.uptime_s < DEADLINE.as_secs_f64(),
            "the round trip never showed: {line:?}"
        );
        previous = line;
    };
    assert_eq!(
        (seen.totals.bytes_in, seen.totals.bytes_out),
        (12, 12),
        "{seen:?}"
    );
    drop(s);
    let (code, last, out) = server.stop();
    assert_eq!(code, 0);
    assert!(last.is_final && last.totals.accepted == 1, "{last:?}");
    // Every line but the last is an interval line.
    let lines: Vec<ServerStats> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines[..lines.len() - 1].iter().all(|l| !l.is_final),
        "{out}"
    );
}

#[test]
fn zero_stats_interval_prints_no_interval_lines() {
    // `--stats-interval 0s` means off (as documented by the flag): only the final line. The
    // window is what is measured: at 0 s, a reporter that did not treat 0 as off would print
    // thousands of lines in it.
    let mut server = spawn_echo_server("poll", &["--stats-interval", "0s"]);
    assert_eq!(server.next_stdout_line(Duration::from_millis(300)), None);
    let (code, _, out) = server.stop();
    assert_eq!((code, out.lines().count()), (0, 1), "{out}");
}
