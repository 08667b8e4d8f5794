//! What one worker measured: outcomes, latencies and per-second intervals.
//!
//! Each worker owns a [`Recorder`]; recorders are merged once at the end (no lock on the hot
//! path). A request belongs to the window in which it **started** (its intended send time in
//! open loop): one started during warm-up is only counted as a warm-up request, whenever it
//! completes; one started inside the window counts, with its whole latency, even when it
//! completes after the window of a timed run has closed (the engines drain such requests, up
//! to `--timeout`, instead of dropping them). Filing by completion time instead lets a request
//! that started in warm-up and stalled across the boundary into the window, and truncates the
//! tail at the end of a timed run: both bias the figures, and the first lets a short window
//! report a QPS above what Little's law allows.

use std::io;
use std::time::{Duration, Instant};

use echolab_core::hist::{self, LatencySummary};
use echolab_core::stats::{IntervalRecord, KindCounts};
use hdrhistogram::Histogram;

/// Why a request failed; the names are the `failures` keys of `BenchReport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureKind {
    /// No progress within `--timeout`.
    Timeout,
    /// ECONNREFUSED: nothing listens (or the backlog refused us).
    Refused,
    /// ECONNRESET / EPIPE: the peer reset the connection.
    Reset,
    /// The bytes echoed back differ from the bytes sent (or from the expected reply body),
    /// and are not another request's echo.
    Mismatch,
    /// The echo is another request's: its stamp (`echolab_core::protocol`) names another
    /// connection, or an earlier request of this one. A server that mixes up connections'
    /// buffers.
    ForeignEcho,
    /// EADDRNOTAVAIL: no free ephemeral port (ip_local_port_range exhausted, e.g. by TIME_WAIT).
    AddrNotAvail,
    /// The peer closed the connection before the reply was complete.
    Eof,
    /// Any other errno, reported by its lower-case name.
    Errno(i32),
}

impl FailureKind {
    /// Classifies an I/O error.
    pub(crate) fn from_io(e: &io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => FailureKind::Refused,
            Some(libc::ECONNRESET) | Some(libc::EPIPE) => FailureKind::Reset,
            Some(libc::EADDRNOTAVAIL) => FailureKind::AddrNotAvail,
            // A blocking socket's SO_RCVTIMEO/SO_SNDTIMEO expiry (socket(7)); connect(2)
            // reports its SO_SNDTIMEO expiry as EINPROGRESS.
            Some(libc::EAGAIN) | Some(libc::EINPROGRESS) | Some(libc::ETIMEDOUT) => {
                FailureKind::Timeout
            }
            Some(n) => FailureKind::Errno(n),
            None => FailureKind::Errno(0),
        }
    }

    /// The report key: `"timeout"`, `"refused"`, ..., or the lower-case errno name
    /// (`"emfile"`), from nix's errno table.
    pub(crate) fn name(self) -> String {
        match self {
            FailureKind::Timeout => "timeout".into(),
            FailureKind::Refused => "refused".into(),
            FailureKind::Reset => "reset".into(),
            FailureKind::Mismatch => "mismatch".into(),
            FailureKind::ForeignEcho => "foreign_echo".into(),
            FailureKind::AddrNotAvail => "addr_not_avail".into(),
            FailureKind::Eof => "eof".into(),
            FailureKind::Errno(n) => format!("{:?}", nix::errno::Errno::from_raw(n)).to_lowercase(),
        }
    }
}

/// Outcome counts and latencies of one interval.
#[derive(Debug, Clone)]
struct IntervalAcc {
    ok: u64,
    failed: u64,
    rx_bytes: u64,
    hist: Histogram<u64>,
}

impl IntervalAcc {
    fn new() -> Self {
        // Two significant figures are plenty for a per-second summary and keep 60 s x workers
        // of interval histograms small (~36 KB each instead of ~270 KB).
        let hist = Histogram::new_with_bounds(1, hist::MAX_TRACKABLE_NS, 2)
            .expect("constant bounds are valid");
        Self {
            ok: 0,
            failed: 0,
            rx_bytes: 0,
            hist,
        }
    }
}

/// The measurement window shared by all workers of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    /// End of warm-up: measurement starts here.
    pub start: Instant,
    /// End of a timed run as planned (`None`: run until the rounds are done); [`Window::end`]
    /// is the end that holds.
    pub planned_end: Option<Instant>,
    /// Interval length for per-interval records (`None`: no intervals).
    pub interval: Option<Duration>,
    /// A SIGINT or SIGTERM ends the window early ([`crate::interrupt`]); false for the connect
    /// storm, whose one round has no window to cut.
    pub interruptible: bool,
}

impl Window {
    /// The end of the window: the planned end, or the first SIGINT/SIGTERM if that came
    /// earlier (a rounds-bounded run then ends there too). Read at every admission, so that
    /// every worker, and the merge, see one end once the signal is in.
    #[inline]
    pub(crate) fn end(&self) -> Option<Instant> {
        let cut = if self.interruptible {
            crate::interrupt::cut_at()
        } else {
            None
        };
        match (self.planned_end, cut) {
            (Some(end), Some(cut)) => Some(end.min(cut)),
            (end, cut) => end.or(cut),
        }
    }
}

/// One worker's measurements.
#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    window: Window,
    /// Latencies of successful requests, nanoseconds.
    pub hist: Histogram<u64>,
    /// Latencies outside `hist`'s range, recorded at its nearest bound ([`hist::record_ns`]).
    pub out_of_range: u64,
    /// Successful requests in the window.
    pub ok: u64,
    /// Failed requests in the window.
    pub failed: u64,
    /// Failures by kind.
    pub failures: KindCounts,
    /// Reply bytes received in the window.
    pub rx_bytes: u64,
    /// Requests completed (either way) during warm-up, not counted above.
    pub warmup_completed: u64,
    /// Latest completion of a request that started in the window (the end of a
    /// rounds-bounded run).
    pub last_completion: Option<Instant>,
    intervals: Vec<IntervalAcc>,
}

impl Recorder {
    /// An empty recorder for `window`.
    pub(crate) fn new(window: Window) -> Self {
        Self {
            window,
            hist: hist::new_latency_histogram(),
            out_of_range: 0,
            ok: 0,
            failed: 0,
            failures: KindCounts::new(),
            rx_bytes: 0,
            warmup_completed: 0,
            last_completion: None,
            intervals: Vec::new(),
        }
    }

    /// Whether a request that started at `started` (and ended at `ended`) belongs to the
    /// measurement: it started at or after the end of warm-up and before the end of a timed
    /// run. Files warm-up requests as such. Returns the interval slot of its start.
    fn admit(&mut self, started: Instant, ended: Instant) -> Option<Option<usize>> {
        if started < self.window.start {
            self.warmup_completed += 1;
            return None;
        }
        if self.window.end().is_some_and(|end| started >= end) {
            return None;
        }
        self.last_completion = Some(self.last_completion.map_or(ended, |l| l.max(ended)));
        let slot = self.window.interval.map(|iv| {
            let idx = ((started - self.window.start).as_nanos() / iv.as_nanos().max(1)) as usize;
            while self.intervals.len() <= idx {
                self.intervals.push(IntervalAcc::new());
            }
            idx
        });
        Some(slot)
    }

    /// Whether a request that started at `started` counts against the measurement (ROUNDS
    /// are counted with the same rule as the figures).
    pub(crate) fn in_window(&self, started: Instant) -> bool {
        started >= self.window.start && self.window.end().is_none_or(|end| started < end)
    }

    /// Records a request that started at `started` (its latency origin) and completed
    /// correctly at `ended` after `latency_ns`, having received `rx_bytes` reply bytes.
    #[inline]
    pub(crate) fn ok(&mut self, started: Instant, ended: Instant, latency_ns: u64, rx_bytes: u64) {
        let Some(slot) = self.admit(started, ended) else {
            return;
        };
        self.ok += 1;
        self.rx_bytes += rx_bytes;
        self.out_of_range += u64::from(hist::record_ns(&mut self.hist, latency_ns));
        if let Some(i) = slot {
            let acc = &mut self.intervals[i];
            acc.ok += 1;
            acc.rx_bytes += rx_bytes;
            // Counted once, above: the interval holds the same value.
            let _ = hist::record_ns(&mut acc.hist, latency_ns);
        }
    }

    /// Records a request that started at `started` and failed at `ended` for `kind`.
    pub(crate) fn failure(&mut self, started: Instant, ended: Instant, kind: FailureKind) {
        let Some(slot) = self.admit(started, ended) else {
            return;
        };
        self.failed += 1;
        *self.failures.entry(kind.name()).or_insert(0) += 1;
        if let Some(i) = slot {
            self.intervals[i].failed += 1;
        }
    }

    /// Adds `other` (same window) into `self`.
    pub(crate) fn merge(&mut self, other: &Recorder) {
        self.hist
            .add(&other.hist)
            .expect("histograms of one run share their bounds");
        self.out_of_range += other.out_of_range;
        self.ok += other.ok;
        self.failed += other.failed;
        for (k, v) in &other.failures {
            *self.failures.entry(k.clone()).or_insert(0) += v;
        }
        self.rx_bytes += other.rx_bytes;
        self.warmup_completed += other.warmup_completed;
        self.last_completion = match (self.last_completion, other.last_completion) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        while self.intervals.len() < other.intervals.len() {
            self.intervals.push(IntervalAcc::new());
        }
        for (mine, theirs) in self.intervals.iter_mut().zip(&other.intervals) {
            mine.ok += theirs.ok;
            mine.failed += theirs.failed;
            mine.rx_bytes += theirs.rx_bytes;
            mine.hist
                .add(&theirs.hist)
                .expect("histograms of one run share their bounds");
        }
    }

    /// The interval length and the number of intervals (a trailing partial one included) in
    /// `measured` seconds; `None` without intervals.
    fn interval_count(&self, measured: Duration) -> Option<(Duration, usize)> {
        let iv = self.window.interval?;
        Some((
            iv,
            measured.as_nanos().div_ceil(iv.as_nanos().max(1)) as usize,
        ))
    }

    /// The latency histogram of each interval up to `measured` seconds, encoded as
    /// [`hist::encode`] does (empty intervals included), in the order of
    /// [`Self::interval_records`]: what lets shards of one run merge exact interval
    /// percentiles.
    pub(crate) fn interval_histograms(&self, measured: Duration) -> Vec<String> {
        let Some((_, count)) = self.interval_count(measured) else {
            return Vec::new();
        };
        let empty = IntervalAcc::new();
        (0..count)
            .map(|i| hist::encode(&self.intervals.get(i).unwrap_or(&empty).hist))
            .collect()
    }

    /// Per-interval records up to `measured` seconds; a trailing partial interval is reported
    /// with its own (shorter) length so its QPS is not understated.
    pub(crate) fn interval_records(&self, measured: Duration) -> Vec<IntervalRecord> {
        let Some((iv, count)) = self.interval_count(measured) else {
            return Vec::new();
        };
        (0..count)
            .map(|i| {
                let begin = iv * i as u32;
                let end = (iv * (i as u32 + 1)).min(measured);
                let secs = (end.saturating_sub(begin)).as_secs_f64().max(1e-9);
                let empty = IntervalAcc::new();
                let acc = self.intervals.get(i).unwrap_or(&empty);
                IntervalRecord {
                    t_s: end.as_secs_f64(),
                    requests_ok: acc.ok,
                    requests_failed: acc.failed,
                    qps: acc.ok as f64 / secs,
                    rx_bytes_per_s: acc.rx_bytes as f64 / secs,
                    latency_us: LatencySummary::from_histogram(&acc.hist),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(start: Instant) -> Window {
        Window {
            start,
            planned_end: Some(start + Duration::from_secs(3)),
            interval: Some(Duration::from_secs(1)),
            interruptible: true,
        }
    }

    #[test]
    fn a_request_belongs_to_the_window_it_started_in() {
        let t0 = Instant::now();
        let start = t0 + Duration::from_secs(1);
        let ms = Duration::from_millis;
        let mut r = Recorder::new(window(start));
        // Started in warm-up, completed 0.5 s into the window: a warm-up request.
        r.ok(t0 + ms(900), start + ms(500), 600_000_000, 12);
        // Started at 0.5 s, completed at 0.6 s: counted in interval 0.
        r.ok(start + ms(500), start + ms(600), 100_000_000, 12);
        // Started at 1.5 s, failed at 2.5 s: counted in interval 1 (its start).
        r.failure(start + ms(1500), start + ms(2500), FailureKind::Timeout);
        // Started at 2.9 s, completed after the 3 s window closed: counted, in interval 2.
        r.ok(start + ms(2900), start + ms(3400), 500_000_000, 12);
        // Started after the window closed: not counted at all.
        r.ok(start + ms(3100), start + ms(3200), 100_000_000, 12);
        assert_eq!((r.ok, r.failed, r.warmup_completed), (2, 1, 1));
        assert_eq!(r.rx_bytes, 24, "two counted replies of 12 bytes");
        assert_eq!(r.failures["timeout"], 1);
        assert_eq!(r.hist.len(), 2);
        assert_eq!(r.last_completion, Some(start + ms(3400)));
        let iv = r.interval_records(Duration::from_secs(3));
        assert_eq!(iv.len(), 3);
        let counts: Vec<(u64, u64)> = iv
            .iter()
            .map(|i| (i.requests_ok, i.requests_failed))
            .collect();
        assert_eq!(counts, vec![(1, 0), (0, 1), (1, 0)]);
        assert_eq!(iv[0].rx_bytes_per_s, 12.0);
        // Each full interval is 1 s long: one request in it is 1 request/s.
        assert_eq!((iv[0].qps, iv[2].qps, iv[2].t_s), (1.0, 1.0, 3.0));
        // Interval histograms: one per interval, empty ones included, holding the latencies
        // of the requests started in it (100 ms in the first, none, 500 ms in the third).
        let hists: Vec<Histogram<u64>> = r
            .interval_histograms(Duration::from_secs(3))
            .iter()
            .map(|t| hist::decode(t).unwrap())
            .collect();
        let lens: Vec<u64> = hists.iter().map(Histogram::len).collect();
        assert_eq!(lens, vec![1, 0, 1]);
        assert!(hists[0].equivalent(hists[0].max(), 100_000_000));
        assert!(hists[2].equivalent(hists[2].max(), 500_000_000));
        // A window of 2.5 s ends with a half interval, whose one request is 2 requests/s.
        let short = r.interval_records(Duration::from_millis(2500));
        assert_eq!(short.len(), 3);
        assert_eq!(
            (short[2].t_s, short[2].qps, short[2].rx_bytes_per_s),
            (2.5, 2.0, 24.0)
        );
    }

    #[test]
    fn in_window_is_the_admission_rule() {
        let t0 = Instant::now();
        let start = t0 + Duration::from_secs(1);
        let r = Recorder::new(window(start));
        assert!(!r.in_window(t0));
        assert!(r.in_window(start));
        assert!(r.in_window(start + Duration::from_millis(2999)));
        assert!(!r.in_window(start + Duration::from_secs(3)));
    }

    #[test]
    fn latencies_outside_the_histograms_range_are_counted_once_and_merged() {
        let start = Instant::now();
        let mut a = Recorder::new(window(start));
        let mut b = Recorder::new(window(start));
        a.ok(start, start, 0, 1);
        a.ok(start, start, 1_000, 1);
        b.ok(start, start, hist::MAX_TRACKABLE_NS + 1, 1);
        assert_eq!(
            a.out_of_range, 1,
            "the interval's copy is not counted again"
        );
        a.merge(&b);
        assert_eq!((a.out_of_range, a.hist.len()), (2, 3));
    }

    #[test]
    fn merge_adds_counts_and_intervals() {
        let start = Instant::now();
        let mut a = Recorder::new(window(start));
        let mut b = Recorder::new(window(start));
        a.ok(start, start, 1_000, 1);
        let late = start + Duration::from_millis(2500);
        b.ok(late, late, 1_000, 1);
        b.failure(start, start, FailureKind::Errno(libc::EMFILE));
        b.ok(start + Duration::from_millis(2600), late, 1_000, 5);
        b.failure(late, late, FailureKind::Timeout);
        b.ok(start - Duration::from_millis(1), start, 1_000, 1);
        a.ok(start - Duration::from_millis(1), start, 1_000, 1);
        a.merge(&b);
        assert_eq!((a.ok, a.failed, a.hist.len()), (3, 2, 3));
        assert_eq!((a.rx_bytes, a.warmup_completed), (7, 2));
        assert_eq!(a.failures["emfile"], 1);
        assert_eq!(a.intervals.len(), 3, "as many intervals as the longer side");
        let iv = a.interval_records(Duration::from_secs(3));
        assert_eq!(
            (
                iv[2].requests_ok,
                iv[2].requests_failed,
                iv[2].rx_bytes_per_s
            ),
            (2, 1, 6.0)
        );
        // 1000 ns = 1 µs, within the interval histogram's two significant figures.
        let max = iv[2].latency_us.unwrap().max;
        assert!((0.99..=1.01).contains(&max), "{max}");
    }

    #[test]
    fn errors_are_classified_by_kind() {
        let kind = |n| FailureKind::from_io(&io::Error::from_raw_os_error(n)).name();
        assert_eq!(kind(libc::ECONNREFUSED), "refused");
        assert_eq!(kind(libc::ECONNRESET), "reset");
        assert_eq!(kind(libc::EADDRNOTAVAIL), "addr_not_avail");
        assert_eq!(kind(libc::EAGAIN), "timeout");
        assert_eq!(kind(libc::ENETUNREACH), "enetunreach");
    }
}
