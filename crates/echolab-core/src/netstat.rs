//! The kernel's TCP counters of one network namespace, as `nstat` names them, and their
//! change over a measurement.
//!
//! `/proc/net/snmp` and `/proc/net/netstat` (proc(5)) hold, per protocol group, a header line
//! (`TcpExt: SyncookiesSent ListenOverflows ...`) followed by a value line (`TcpExt: 0 12
//! ...`). `nstat` names a counter by group and field (`TcpExtListenOverflows`,
//! `TcpRetransSegs`); so do the run records. Only the `Tcp` and `TcpExt` groups are kept:
//! they hold what explains a tail (ListenOverflows, ListenDrops, TCPSynRetrans, TCPTimeouts,
//! TW, TWRecycled, TCPAbortOn*, RetransSegs). The files belong to the namespace of the process
//! that reads them, so a client and a server in different namespaces each read their own.

use std::collections::BTreeMap;
use std::path::Path;

/// Counter values by nstat name (`TcpExtListenOverflows`), cumulative since the namespace was
/// created.
pub type CounterSnapshot = BTreeMap<String, u64>;

/// Changes of counters over a measurement, by nstat name; only counters that changed.
/// Signed: a few `Tcp` fields are gauges (`TcpCurrEstab`) that can fall.
pub type CounterDeltas = BTreeMap<String, i64>;

/// The protocol groups kept.
const GROUPS: [&str; 2] = ["Tcp", "TcpExt"];

/// Parses the header/value line pairs of one `/proc/net/snmp` or `/proc/net/netstat` text into
/// `out`, keeping the `GROUPS`. Malformed pairs (different field counts, non-numeric values)
/// are skipped: a counter file of another kernel must not fail a run.
pub fn parse_into(text: &str, out: &mut CounterSnapshot) {
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks_exact(2) {
        let (Some((group, names)), Some((group2, values))) =
            (pair[0].split_once(':'), pair[1].split_once(':'))
        else {
            continue;
        };
        if group != group2 || !GROUPS.contains(&group) {
            continue;
        }
        let names: Vec<&str> = names.split_whitespace().collect();
        let values: Vec<&str> = values.split_whitespace().collect();
        if names.len() != values.len() {
            continue;
        }
        for (n, v) in names.iter().zip(values) {
            // Tcp's MaxConn is -1 ("dynamic"); it is a constant, not a counter.
            if let Ok(v) = v.parse::<u64>() {
                out.insert(format!("{group}{n}"), v);
            }
        }
    }
}

/// Reads the counters of the calling process's network namespace from `proc_net`
/// (normally `/proc/net`). A missing file yields the counters of the other one, or none.
pub fn read_from(proc_net: &Path) -> CounterSnapshot {
    let mut out = CounterSnapshot::new();
    for file in ["snmp", "netstat"] {
        if let Ok(text) = std::fs::read_to_string(proc_net.join(file)) {
            parse_into(&text, &mut out);
        }
    }
    out
}

/// Reads this process's namespace counters from `/proc/net`.
pub fn read() -> CounterSnapshot {
    read_from(Path::new("/proc/net"))
}

/// `after − before` for every counter that changed (a counter missing before counts from 0).
pub fn deltas(before: &CounterSnapshot, after: &CounterSnapshot) -> CounterDeltas {
    after
        .iter()
        .filter_map(|(k, &a)| {
            let b = before.get(k).copied().unwrap_or(0);
            (a != b).then(|| (k.clone(), a as i64 - b as i64))
        })
        .collect()
}

/// The counters that, when non-zero over a cell, mean the kernel dropped, refused or
/// retransmitted something: a cell with any of them is flagged beside its tail.
pub const TROUBLE: [&str; 9] = [
    "TcpExtListenOverflows",
    "TcpExtListenDrops",
    "TcpExtTCPSynRetrans",
    "TcpExtTCPTimeouts",
    "TcpRetransSegs",
    "TcpExtTCPAbortOnData",
    "TcpExtTCPAbortOnTimeout",
    "TcpExtTCPAbortFailed",
    "TcpExtTCPTimeWaitOverflow",
];

/// The connection-tracking table of the calling process's namespace: entries in use and the
/// table's size (`/proc/sys/net/netfilter/nf_conntrack_count` and `nf_conntrack_max`, the
/// kernel's Documentation/networking/nf_conntrack-sysctl.rst). When it is full the kernel
/// drops the first packet of every new connection ("nf_conntrack: table full, dropping
/// packet"), which a client sees as SYN retransmissions and connect timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConntrackFill {
    /// Entries in use.
    pub entries: u64,
    /// The table's size.
    pub max: u64,
}

impl ConntrackFill {
    /// Reads the table's fill; `None` where connection tracking is not loaded (no such files)
    /// or a file does not hold a number.
    pub fn read() -> Option<Self> {
        let num = |name: &str| -> Option<u64> {
            std::fs::read_to_string(format!("/proc/sys/net/netfilter/{name}"))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        Some(Self {
            entries: num("nf_conntrack_count")?,
            max: num("nf_conntrack_max")?,
        })
    }

    /// At least 90% of the table in use: the next burst of connections may find it full.
    pub fn nearly_full(&self) -> bool {
        self.max > 0 && self.entries.saturating_mul(10) >= self.max.saturating_mul(9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shortened from a real /proc/net/netstat and /proc/net/snmp of kernel 6.x.
    const NETSTAT: &str = "TcpExt: SyncookiesSent ListenOverflows ListenDrops TW TCPSynRetrans\n\
TcpExt: 0 7 7 1500 3\n\
IpExt: InNoRoutes InOctets\n\
IpExt: 0 123456\n";
    const SNMP: &str = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
Tcp: RtoAlgorithm MaxConn ActiveOpens CurrEstab RetransSegs\n\
Tcp: 1 -1 2000 3 5\n";

    #[test]
    fn keeps_tcp_groups_under_nstat_names() {
        let mut s = CounterSnapshot::new();
        parse_into(NETSTAT, &mut s);
        parse_into(SNMP, &mut s);
        assert_eq!(s["TcpExtListenOverflows"], 7);
        assert_eq!(s["TcpExtTW"], 1500);
        assert_eq!(s["TcpActiveOpens"], 2000);
        assert_eq!(s["TcpRetransSegs"], 5);
        assert!(!s.contains_key("TcpMaxConn"), "-1 is not a counter");
        assert!(!s.keys().any(|k| k.starts_with("Ip")), "{s:?}");
        assert_eq!(s.len(), 9);
    }

    #[test]
    fn mismatched_lines_are_skipped_not_misread() {
        let mut s = CounterSnapshot::new();
        parse_into("TcpExt: A B\nTcpExt: 1\nTcp: X\nTcpExt: 4\n", &mut s);
        assert!(s.is_empty(), "{s:?}");
    }

    #[test]
    fn deltas_keep_changes_only_and_may_fall() {
        let before: CounterSnapshot = [("TcpExtTW".to_string(), 10), ("TcpCurrEstab".into(), 5)]
            .into_iter()
            .collect();
        let after: CounterSnapshot = [
            ("TcpExtTW".to_string(), 10),
            ("TcpCurrEstab".into(), 2),
            ("TcpExtListenOverflows".into(), 4),
        ]
        .into_iter()
        .collect();
        let d = deltas(&before, &after);
        assert_eq!(d.len(), 2);
        assert_eq!(d["TcpCurrEstab"], -3);
        assert_eq!(d["TcpExtListenOverflows"], 4);
    }

    #[test]
    fn this_namespace_has_tcp_counters() {
        let s = read();
        assert!(s.contains_key("TcpActiveOpens"), "{s:?}");
        assert!(s.contains_key("TcpExtListenOverflows"), "{s:?}");
    }

    #[test]
    fn conntrack_is_nearly_full_from_nine_tenths() {
        let at = |entries| ConntrackFill {
            entries,
            max: 262_144,
        };
        // 90% of 262,144 is 235,929.6.
        assert!(!at(235_929).nearly_full());
        assert!(at(235_930).nearly_full());
        assert!(at(262_144).nearly_full());
        assert!(!at(0).nearly_full());
        assert!(!ConntrackFill { entries: 0, max: 0 }.nearly_full());
    }
}
