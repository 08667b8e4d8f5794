//! The thread engine: one OS thread per connection with blocking sockets, the shape of seed
//! 000's echo-kp-bench (N pthreads, `pthread_barrier_wait`, blocking send/recv). It exists
//! to compare against the event engine, so it counts the same system calls and files results
//! the same way.
//!
//! `--timeout` means what it means on the event engine: a connect(2) gets it, then the
//! exchange (the request written, its reply read) gets it again, as one deadline, not per
//! call. The seed's shape, a blocking write of the whole request and then blocking reads,
//! is kept where it is safe: SO_SNDTIMEO/SO_RCVTIMEO (socket(7); Linux also applies
//! SO_SNDTIMEO to a blocking connect(2)) bound the first call of each exchange, which starts
//! with the deadline; any later call first waits in ppoll(2) for what is left of it (a reply
//! trickling in byte by byte would otherwise reset the timeout at every byte). A request
//! larger than [`BLOCKING_REQUEST_MAX`] is written and read interleaved (ppoll for either
//! direction, send/recv with MSG_DONTWAIT), because writing it whole before reading
//! deadlocks once the echo fills the socket buffers of both sides. Each thread buffers its results and hands them to a shared
//! recorder under a lock every [`FLUSH_EVERY`] requests: 5000 per-thread histograms
//! (~270 KB each) would not fit in memory.

use std::io;
use std::os::fd::RawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::request::Request;
use super::{await_start, CpuMeter, Pattern, Plan, Reply, RunOutcome};
use crate::gate::{StartGate, Ticket};
use crate::recorder::{FailureKind, Recorder, Window};
use crate::syscalls::{self as sys, SocketOptions, SyscallCounters};

/// Results a connection thread buffers before taking the shared lock.
pub(crate) const FLUSH_EVERY: usize = 256;

/// Largest request written whole before its reply is read (the seed's blocking shape). The
/// echo of a request this size fits in the client's receive buffer (tcp_rmem's default,
/// 128 KiB, advertises about half of it as window: tcp(7), tcp_adv_win_scale) while the
/// server blocks on nothing; larger requests take the interleaved path.
pub(crate) const BLOCKING_REQUEST_MAX: usize = 64 * 1024;

/// How late a call of the blocking path may start and still rely on the socket timeout
/// alone: SO_RCVTIMEO would end it at most this much after the deadline.
const SOCKOPT_SLACK: Duration = Duration::from_millis(1);

/// Stack of a connection thread: its buffers live on the heap, and 5000 threads with the
/// default 2 MiB stacks would reserve 10 GiB of address space.
const STACK_BYTES: usize = 128 * 1024;

/// What all connection threads add into.
struct Shared {
    recorder: Option<Recorder>,
    syscalls: SyscallCounters,
    setup_failures: u64,
}

/// One finished request: when it started (its latency origin), when it ended, and how.
enum Sample {
    Ok {
        started: Instant,
        at: Instant,
        latency_ns: u64,
    },
    Failed {
        started: Instant,
        at: Instant,
        kind: FailureKind,
    },
}

/// Runs `plan` with one thread per connection.
///
/// # Errors
/// connect-storm (event engine only), or a thread that could not be created (EAGAIN: see
/// RLIMIT_NPROC and /proc/sys/kernel/threads-max); the threads that did start run to the end.
pub(crate) fn run(plan: &Plan) -> io::Result<RunOutcome> {
    if plan.pattern == Pattern::Storm {
        return Err(io::Error::other(
            "connect-storm runs on the event engine only",
        ));
    }
    let gate = StartGate::new(plan.conns + 1);
    let shared = Mutex::new(Shared {
        recorder: None,
        syscalls: SyscallCounters::default(),
        setup_failures: 0,
    });
    let mut cpu = CpuMeter::start();
    let (start, spawn_error) = std::thread::scope(|s| {
        let mut spawn_error = None;
        for id in 0..plan.conns {
            let ticket = gate.ticket();
            let shared = &shared;
            // A failed spawn drops the closure and its ticket, so the gate still opens.
            let spawned = std::thread::Builder::new()
                .stack_size(STACK_BYTES)
                .spawn_scoped(s, move || {
                    connection_thread(plan, plan.first_id + id, ticket, shared)
                });
            if let Err(e) = spawned {
                spawn_error.get_or_insert(io::Error::new(
                    e.kind(),
                    format!("cannot start connection thread {id}: {e}"),
                ));
            }
        }
        let start = await_start(plan, &gate, &mut cpu);
        (start, spawn_error)
    });
    let cpu = cpu.stop();
    if let Some(e) = spawn_error {
        return Err(e);
    }
    let shared = shared.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut out = RunOutcome::empty(plan, start, cpu, plan.conns as u64);
    if let Some(r) = &shared.recorder {
        out.recorder.merge(r);
    }
    out.syscalls = shared.syscalls;
    out.setup_failures = shared.setup_failures;
    Ok(out)
}

/// One connection's whole run.
fn connection_thread(plan: &Plan, id: usize, ticket: Ticket<'_>, shared: &Mutex<Shared>) {
    let opts = SocketOptions {
        blocking_timeout: Some(plan.timeout),
        source: plan.source_for(id),
        ..plan.sock
    };
    let mut sys = SyscallCounters::default();
    let mut conn: Option<RawFd> = None;
    let mut setup_failures = 0;
    if plan.pattern == Pattern::Long {
        match open_connected(&mut sys, plan, &opts) {
            Ok(fd) => conn = Some(fd),
            Err(_) => setup_failures += 1,
        }
    }
    let opened = ticket.wait();
    let window = plan.window(opened);
    let mut pacer = plan.pacer(id, opened);
    let mut rounds_left = plan.rounds();
    let mut samples = Vec::with_capacity(FLUSH_EVERY);
    let mut scratch = vec![0u8; plan.reply_len().clamp(1, 64 * 1024)];
    let mut request = Request::new(plan, id);
    let mut baseline = None;
    loop {
        let now = Instant::now();
        if baseline.is_none() && !plan.warmup.is_zero() && now >= window.start {
            baseline = Some(sys.clone());
        }
        // A request starts at its slot in open loop (however late it is sent), else now; the
        // window's rule (recorder.rs) decides both what counts and when a timed run stops.
        let starts_at = pacer.as_ref().map_or(now, |p| p.due());
        let ended = window.end().is_some_and(|end| starts_at >= end);
        if rounds_left == 0 || ended {
            break;
        }
        if let Some(end) = window.end().filter(|end| now >= *end + plan.timeout) {
            // Open loop far behind its schedule after the window closed: the slots of the
            // window not yet sent failed by timeout, as the event engine counts them.
            while let Some(slot) = pacer.as_mut().filter(|p| p.due() < end).map(|p| p.take()) {
                samples.push(Sample::Failed {
                    started: slot,
                    at: now,
                    kind: FailureKind::Timeout,
                });
            }
            break;
        }
        let mut origin = now;
        if let Some(p) = pacer.as_mut() {
            origin = p.take();
            if origin > now {
                // Open loop: wait for this request's slot (a schedule, not a readiness wait).
                std::thread::sleep(origin - now);
            }
        }
        request.next();
        let io = Io {
            plan,
            request: &request,
            scratch: &mut scratch,
        };
        let outcome = match plan.pattern {
            Pattern::Long => long_request(&mut sys, io, &opts, &mut conn, &mut origin),
            _ => short_request(&mut sys, io, &opts),
        };
        let at = Instant::now();
        samples.push(match outcome {
            Ok(()) => Sample::Ok {
                started: origin,
                at,
                latency_ns: at.saturating_duration_since(origin).as_nanos() as u64,
            },
            Err(kind) => Sample::Failed {
                started: origin,
                at,
                kind,
            },
        });
        if origin >= window.start {
            rounds_left -= 1;
        }
        if samples.len() >= FLUSH_EVERY {
            flush(shared, window, plan, &mut samples);
        }
    }
    if let Some(fd) = conn.take() {
        sys::close(&mut sys, fd);
    }
    flush(shared, window, plan, &mut samples);
    let syscalls = match &baseline {
        Some(b) => sys.since(b),
        None if !plan.warmup.is_zero() => SyscallCounters::default(),
        None => sys,
    };
    let mut sh = shared.lock().unwrap_or_else(|p| p.into_inner());
    sh.syscalls.merge(&syscalls);
    sh.setup_failures += setup_failures;
}

fn flush(shared: &Mutex<Shared>, window: Window, plan: &Plan, samples: &mut Vec<Sample>) {
    let mut sh = shared.lock().unwrap_or_else(|p| p.into_inner());
    let rec = sh.recorder.get_or_insert_with(|| Recorder::new(window));
    let rx = plan.reply_len() as u64;
    for s in samples.drain(..) {
        match s {
            Sample::Ok {
                started,
                at,
                latency_ns,
            } => rec.ok(started, at, latency_ns, rx),
            Sample::Failed { started, at, kind } => rec.failure(started, at, kind),
        }
    }
}

/// A blocking socket connected to the server; closed again on failure.
fn open_connected(
    sys: &mut SyscallCounters,
    plan: &Plan,
    opts: &SocketOptions,
) -> Result<RawFd, FailureKind> {
    let fd = sys::open_tcp_socket(sys, &plan.addr, opts).map_err(|e| FailureKind::from_io(&e))?;
    match sys::connect(sys, fd, &plan.addr) {
        Ok(()) => Ok(fd),
        Err(e) => {
            sys::close(sys, fd);
            Err(FailureKind::from_io(&e))
        }
    }
}

/// What one request's exchange works with: the plan, the connection's stamped request and
/// the buffer replies are read into.
struct Io<'a> {
    plan: &'a Plan,
    request: &'a Request,
    scratch: &'a mut [u8],
}

/// Connect, send, receive, close; latency runs from before connect to after close.
fn short_request(
    sys: &mut SyscallCounters,
    io: Io<'_>,
    opts: &SocketOptions,
) -> Result<(), FailureKind> {
    let fd = open_connected(sys, io.plan, opts)?;
    let result = exchange(sys, fd, io);
    sys::close(sys, fd);
    result
}

/// Send and receive on the connection, (re)connecting first if it is closed; latency runs
/// from the send (or the open-loop slot). The connection is closed after a failure.
fn long_request(
    sys: &mut SyscallCounters,
    io: Io<'_>,
    opts: &SocketOptions,
    conn: &mut Option<RawFd>,
    origin: &mut Instant,
) -> Result<(), FailureKind> {
    let fd = match *conn {
        Some(fd) => fd,
        None => *conn.insert(open_connected(sys, io.plan, opts)?),
    };
    if io.plan.rate.is_none() {
        *origin = Instant::now();
    }
    let result = exchange(sys, fd, io);
    if result.is_err() {
        sys::close(sys, fd);
        *conn = None;
    }
    result
}

/// Writes the request and reads and verifies its whole reply within `plan.timeout` from now;
/// blocking (the seed's shape) up to [`BLOCKING_REQUEST_MAX`], interleaved above it.
fn exchange(sys: &mut SyscallCounters, fd: RawFd, io: Io<'_>) -> Result<(), FailureKind> {
    let started = Instant::now();
    let deadline = started + io.plan.timeout;
    if io.request.bytes().len() > BLOCKING_REQUEST_MAX {
        return exchange_interleaved(sys, fd, io, deadline);
    }
    let Io {
        plan,
        request,
        scratch,
    } = io;
    let request_bytes = request.bytes();
    // A call started later than SOCKOPT_SLACK into the exchange could outlive the deadline
    // on its socket timeout alone, so it waits for readiness within what is left first.
    let bound = |sys: &mut SyscallCounters, events| {
        if started.elapsed() > SOCKOPT_SLACK {
            wait_ready(sys, fd, events, deadline)?;
        }
        Ok(())
    };
    let mut sent = 0;
    while sent < request_bytes.len() {
        bound(sys, libc::POLLOUT)?;
        match sys::write(sys, fd, &request_bytes[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FailureKind::from_io(&e)),
        }
    }
    let mut reply = ReplyCheck::new(plan, request);
    while !reply.done() {
        bound(sys, libc::POLLIN)?;
        let want = reply.left().min(scratch.len());
        match sys::read(sys, fd, &mut scratch[..want]) {
            Ok(n) => reply.take(&scratch[..n])?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FailureKind::from_io(&e)),
        }
    }
    Ok(())
}

/// A large request's exchange: writes whatever the send buffer takes and reads whatever
/// arrived, each turn after one ppoll(2) for either, until the whole reply is in or the
/// deadline passes.
fn exchange_interleaved(
    sys: &mut SyscallCounters,
    fd: RawFd,
    io: Io<'_>,
    deadline: Instant,
) -> Result<(), FailureKind> {
    let Io {
        plan,
        request: stamped,
        scratch,
    } = io;
    let request = stamped.bytes();
    let mut sent = 0;
    let mut reply = ReplyCheck::new(plan, stamped);
    while !reply.done() {
        let events = if sent < request.len() {
            libc::POLLIN | libc::POLLOUT
        } else {
            libc::POLLIN
        };
        let ready = wait_ready(sys, fd, events, deadline)?;
        // POLLERR/POLLHUP: the next call reports the socket's error or end of stream.
        let failed = ready & (libc::POLLERR | libc::POLLHUP) != 0;
        if sent < request.len() && (ready & libc::POLLOUT != 0 || failed) {
            match sys::write_nowait(sys, fd, &request[sent..]) {
                Ok(n) => sent += n,
                Err(e) if retry_later(&e) => {}
                Err(e) => return Err(FailureKind::from_io(&e)),
            }
        }
        if ready & libc::POLLIN != 0 || failed {
            let want = reply.left().min(scratch.len());
            match sys::read_nowait(sys, fd, &mut scratch[..want]) {
                Ok(n) => reply.take(&scratch[..n])?,
                Err(e) if retry_later(&e) => {}
                Err(e) => return Err(FailureKind::from_io(&e)),
            }
        }
    }
    Ok(())
}

/// EINTR, or EAGAIN from a MSG_DONTWAIT call after a spurious wake-up.
fn retry_later(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
    )
}

/// Waits until `fd` is ready for `events` or `deadline` passes (then a timeout failure);
/// returns the ready bits.
fn wait_ready(
    sys: &mut SyscallCounters,
    fd: RawFd,
    events: libc::c_short,
    deadline: Instant,
) -> Result<libc::c_short, FailureKind> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(FailureKind::Timeout);
        }
        match sys::poll_one(sys, fd, events, left) {
            Ok(0) => return Err(FailureKind::Timeout),
            Ok(ready) => return Ok(ready),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FailureKind::from_io(&e)),
        }
    }
}

/// The expected reply, compared chunk by chunk as it arrives ([`Request::check`]).
struct ReplyCheck<'a> {
    reply: &'a Reply,
    request: &'a Request,
    len: usize,
    received: usize,
}

impl<'a> ReplyCheck<'a> {
    fn new(plan: &'a Plan, request: &'a Request) -> Self {
        Self {
            reply: &plan.reply,
            request,
            len: plan.reply_len(),
            received: 0,
        }
    }

    fn done(&self) -> bool {
        self.received == self.len
    }

    fn left(&self) -> usize {
        self.len - self.received
    }

    /// Accepts the next `chunk` read (empty: end of stream before the reply was whole).
    fn take(&mut self, chunk: &[u8]) -> Result<(), FailureKind> {
        if chunk.is_empty() {
            return Err(FailureKind::Eof);
        }
        self.request.check(self.reply, self.received, chunk)?;
        self.received += chunk.len();
        Ok(())
    }
}
