//! The start barrier: all connections begin together, as seed 000's echo-kp-bench does with
//! `pthread_barrier_wait`, and every worker learns the same start instant.

use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// A one-shot barrier for a fixed number of parties that hands each of them the instant at
/// which the last one arrived.
#[derive(Debug)]
pub(crate) struct StartGate {
    parties: usize,
    state: Mutex<(usize, Option<Instant>)>,
    opened: Condvar,
}

impl StartGate {
    /// A gate that opens when `parties` parties have arrived.
    pub(crate) fn new(parties: usize) -> Self {
        Self {
            parties,
            state: Mutex::new((0, None)),
            opened: Condvar::new(),
        }
    }

    /// A ticket for one party; it arrives (without waiting) when dropped unused, so a worker
    /// that fails or panics before the gate cannot leave the others waiting forever.
    pub(crate) fn ticket(&self) -> Ticket<'_> {
        Ticket {
            gate: self,
            used: false,
        }
    }

    /// Blocks until every party but one has arrived (or the gate opened): the last party
    /// (the coordinator) learns that all workers are ready without arriving itself.
    pub(crate) fn await_others(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while st.0 + 1 < self.parties && st.1.is_none() {
            st = self.opened.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn arrive(&self) -> std::sync::MutexGuard<'_, (usize, Option<Instant>)> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.0 += 1;
        if st.0 >= self.parties && st.1.is_none() {
            st.1 = Some(Instant::now());
        }
        // Every arrival, not only the last, wakes a waiting `await_others`.
        self.opened.notify_all();
        st
    }
}

/// One party's right to pass a [`StartGate`] once.
#[derive(Debug)]
pub(crate) struct Ticket<'a> {
    gate: &'a StartGate,
    used: bool,
}

impl Ticket<'_> {
    /// Arrives and blocks until every party has; returns the instant the gate opened.
    pub(crate) fn wait(mut self) -> Instant {
        self.used = true;
        let mut st = self.gate.arrive();
        loop {
            if let Some(t) = st.1 {
                return t;
            }
            st = self.gate.opened.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if !self.used {
            drop(self.gate.arrive());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_parties_get_the_same_instant_and_dropped_tickets_count() {
        let gate = StartGate::new(3);
        let times: Vec<Instant> = std::thread::scope(|s| {
            let a = s.spawn(|| gate.ticket().wait());
            let b = s.spawn(|| gate.ticket().wait());
            drop(gate.ticket());
            vec![a.join().unwrap(), b.join().unwrap()]
        });
        assert_eq!(times[0], times[1]);
    }

    #[test]
    fn await_others_returns_once_all_but_the_last_party_arrived() {
        let gate = StartGate::new(3);
        let arrived = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let ticket = gate.ticket();
                        arrived.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        ticket.wait()
                    })
                })
                .collect();
            gate.await_others();
            let seen = arrived.load(std::sync::atomic::Ordering::SeqCst);
            let opened_without_us = gate.state.lock().unwrap().1.is_some();
            // Arrive before asserting, so that a failure cannot leave the workers waiting.
            let opened = gate.ticket().wait();
            for w in workers {
                assert_eq!(w.join().unwrap(), opened);
            }
            // Both workers were at the gate, and it had not opened without the coordinator.
            assert_eq!(seen, 2);
            assert!(!opened_without_us);
        });
    }
}
