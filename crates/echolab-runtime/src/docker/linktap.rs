//! One reading of the link's counters, whichever backend carries it: the userspace wire's
//! ([`super::wiretap`]) or kernel netem's qdiscs ([`super::qdisctap`]); two readings of the
//! same link, before and after a run or a calibration, give what it carried and dropped in
//! between ([`LinkReading::until`]).

use anyhow::anyhow;
use echolab_core::link_counters::WireStats;
use echolab_core::results::LinkCounters;

use super::qdisctap::QdiscSnapshot;

/// The link's counters at one moment.
#[derive(Debug, Clone)]
pub enum LinkReading {
    /// The userspace wire's (summed over the wires of a lab run).
    Wire(Box<WireStats>),
    /// Kernel netem's qdiscs, one snapshot per link host.
    Qdiscs(Vec<QdiscSnapshot>),
}

impl LinkReading {
    /// What the link did from this reading to `after`.
    ///
    /// # Errors
    /// The readings are of different backends, or a kernel netem qdisc was replaced in
    /// between (its handle changed).
    pub fn until(&self, after: &LinkReading) -> anyhow::Result<LinkCounters> {
        match (self, after) {
            (LinkReading::Wire(b), LinkReading::Wire(a)) => Ok(super::wiretap::between(b, a)),
            (LinkReading::Qdiscs(b), LinkReading::Qdiscs(a)) => super::qdisctap::between(b, a),
            _ => Err(anyhow!("the link's backend changed between two readings")),
        }
    }
}
