//! epoll reactors: `epoll-lt`, `epoll-et`, and the per-worker reactor of `prefork` and
//! `reuseport` (edge-triggered), all one function, [`run`], parametrised by [`Trigger`].
//!
//! Level-triggered (the seeds' LT server): one accept per listener notification, one read per
//! connection notification; connections are registered for EPOLLIN, switched to EPOLLOUT with
//! epoll_ctl(MOD) while output is pending and back afterwards.
//!
//! Edge-triggered (the seeds' ET server): accepts are drained to EAGAIN; each connection is
//! registered once for EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET and never modified, so a request
//! costs one read and one write plus its share of an epoll_wait. Reads stop at a short read (see
//! `Conn::on_edge_event`). A connection that keeps the buffer full is served at most
//! [`EDGE_READ_BUDGET`] reads per round and then put on a carry list, so one bulk sender cannot
//! starve the others.

use std::convert::Infallible;
use std::net::TcpListener;
use std::os::fd::RawFd;

use anyhow::Context as _;
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};

use crate::counters::{clock, ErrKind, Sys, WorkerCounters};
use crate::readiness::accept::{Accepted, Acceptor};
use crate::readiness::conn::{Conn, Protocol, Slab, Step};
use crate::readiness::{io, worker};
use crate::serve::{Running, ServeCtx};

/// Level- or edge-triggered readiness (epoll(7)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trigger {
    /// EPOLLIN/EPOLLOUT reported while the condition holds.
    Level,
    /// Reported on changes only (EPOLLET): the reactor must drain.
    Edge,
}

/// Full reads one connection gets per round before the others are served (edge-triggered).
pub(super) const EDGE_READ_BUDGET: u32 = 16;

/// Events fetched per epoll_wait.
const MAX_EVENTS: usize = 1024;

/// The epoll data value of the listener; connections use their descriptor number.
const LISTENER: u64 = u64::MAX;

/// How a reactor registers its listener.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReactorSpec {
    /// Trigger mode for the listener and the connections.
    pub trigger: Trigger,
    /// Add EPOLLEXCLUSIVE to the listener registration (prefork's shared listener; epoll_ctl(2)).
    pub exclusive: bool,
}

/// How long reactors may take to register their listeners before start-up fails.
pub(super) const STARTUP_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until the reactor of every slot in `slots` has registered its listener (the slot's
/// `listening`), checking every millisecond, so that the server announces readiness with no
/// reactor still starting (whose counters would lack the listener's epoll_ctl(2)). Calls
/// `check(i)` for each reactor still starting on every look, to fail at once when it died.
///
/// # Errors
/// What `check` returns, or `deadline` passed (naming the reactors still starting).
pub(super) fn wait_listening(
    slots: &[WorkerCounters],
    deadline: std::time::Duration,
    check: impl Fn(usize) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let until = std::time::Instant::now() + deadline;
    loop {
        let starting: Vec<usize> = (0..slots.len())
            .filter(|&i| slots[i].listening.get() == 0)
            .collect();
        if starting.is_empty() {
            return Ok(());
        }
        for &i in &starting {
            check(i)?;
        }
        anyhow::ensure!(
            std::time::Instant::now() < until,
            "workers {starting:?} did not register the listener within {deadline:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Starts `epoll-lt` or `epoll-et`: one reactor thread on the single listener.
///
/// # Errors
/// When the listener cannot be made non-blocking or the thread cannot start.
pub(super) fn start(ctx: ServeCtx, trigger: Trigger) -> anyhow::Result<Running> {
    let listener = ctx.listeners.into_iter().next().context("no listener")?;
    let proto = Protocol::new(ctx.read_buf, ctx.reply_bytes);
    let counters = &ctx.counters[0];
    counters.pid.add(u64::from(std::process::id()));
    let spec = ReactorSpec {
        trigger,
        exclusive: false,
    };
    let name = if trigger == Trigger::Edge {
        "epoll-et"
    } else {
        "epoll-lt"
    };
    worker::spawn(name.into(), move || run(listener, spec, proto, counters))?;
    Ok(Running::default())
}

/// Serves `listener` forever with one epoll instance; returns only on a fatal error (epoll
/// creation or epoll_wait failing, or the listener's registration failing).
pub(super) fn run(
    listener: TcpListener,
    spec: ReactorSpec,
    proto: Protocol,
    c: &WorkerCounters,
) -> anyhow::Result<Infallible> {
    Reactor::new(listener, spec, proto, c)?.serve()
}

/// epoll interest of a connection: fixed for edge-triggered, by pending output for level-triggered.
fn conn_interest(trigger: Trigger, want: Step) -> EpollFlags {
    match trigger {
        Trigger::Edge => {
            EpollFlags::EPOLLIN
                | EpollFlags::EPOLLOUT
                | EpollFlags::EPOLLRDHUP
                | EpollFlags::EPOLLET
        }
        Trigger::Level if want == Step::WantWrite => EpollFlags::EPOLLOUT,
        Trigger::Level => EpollFlags::EPOLLIN,
    }
}

struct Reactor<'c> {
    epoll: Epoll,
    acceptor: Acceptor,
    spec: ReactorSpec,
    proto: Protocol,
    conns: Slab,
    /// Edge-triggered connections whose read budget ran out; served again without waiting.
    carry: Vec<RawFd>,
    c: &'c WorkerCounters,
}

impl<'c> Reactor<'c> {
    fn new(
        listener: TcpListener,
        spec: ReactorSpec,
        proto: Protocol,
        c: &'c WorkerCounters,
    ) -> anyhow::Result<Self> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).context("epoll_create1")?;
        let acceptor = Acceptor::new(listener).context("listener to non-blocking")?;
        let me = Self {
            epoll,
            acceptor,
            spec,
            proto,
            conns: Slab::default(),
            carry: Vec::new(),
            c,
        };
        me.arm_listener().context("epoll_ctl(ADD listener)")?;
        me.c.listening.set(1);
        Ok(me)
    }

    fn edge(&self) -> bool {
        self.spec.trigger == Trigger::Edge
    }

    /// One epoll_ctl(2), counted and (with `--time-syscalls`) timed.
    fn ctl<T>(&self, call: impl FnOnce(&Epoll) -> T) -> T {
        self.c.sys(Sys::EpollCtl).inc();
        let t = clock();
        let r = call(&self.epoll);
        self.c.timed(Sys::EpollCtl, t);
        r
    }

    fn arm_listener(&self) -> nix::Result<()> {
        let mut flags = EpollFlags::EPOLLIN;
        if self.edge() {
            flags |= EpollFlags::EPOLLET;
        }
        if self.spec.exclusive {
            flags |= EpollFlags::EPOLLEXCLUSIVE;
        }
        self.ctl(|e| e.add(self.acceptor.fd(), EpollEvent::new(flags, LISTENER)))
    }

    /// Interest of a connection: fixed for edge-triggered, by pending output for level-triggered.
    fn conn_flags(&self, want: Step) -> EpollFlags {
        conn_interest(self.spec.trigger, want)
    }

    fn serve(mut self) -> anyhow::Result<Infallible> {
        let mut events = vec![EpollEvent::empty(); MAX_EVENTS];
        loop {
            let timeout = if !self.carry.is_empty() {
                EpollTimeout::ZERO
            } else {
                match self.acceptor.wait_limit() {
                    // Round up so that the wake-up is not a millisecond early (and a busy loop).
                    Some(d) => EpollTimeout::try_from(d.as_millis() as u64 + 1)
                        .unwrap_or(EpollTimeout::MAX),
                    None => EpollTimeout::NONE,
                }
            };
            self.c.sys(Sys::EpollWait).inc();
            let t = clock();
            let r = self.epoll.wait(&mut events, timeout);
            self.c.timed(Sys::EpollWait, t);
            let n = match r {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(anyhow::anyhow!("epoll_wait: {e}")),
            };
            self.c.events_returned.add(n as u64);
            if n == 0 {
                self.c.empty_wakeups.inc();
            }
            for ev in &events[..n] {
                if ev.data() == LISTENER {
                    self.on_listener();
                } else {
                    self.on_conn(ev.data() as RawFd, ev.events());
                }
            }
            for fd in std::mem::take(&mut self.carry) {
                self.on_conn(fd, EpollFlags::EPOLLIN);
            }
            self.maybe_resume(false);
        }
    }

    fn on_listener(&mut self) {
        if self.acceptor.is_paused() {
            return;
        }
        loop {
            match self.acceptor.accept(self.c) {
                Accepted::Conn(fd) => {
                    let conn = Conn::new(fd, &self.proto);
                    let flags = self.conn_flags(Step::WantRead);
                    let event = EpollEvent::new(flags, conn.raw_fd() as u64);
                    if let Err(e) = self.ctl(|ep| ep.add(conn.fd(), event)) {
                        self.c.error(ErrKind::from_errno(e)).inc();
                        io::close(conn.into_fd(), self.c);
                        continue;
                    }
                    self.conns.insert(conn);
                }
                Accepted::Skipped => continue,
                Accepted::Empty => return,
                Accepted::Paused => {
                    // Failure means it was not registered, which is the state we want.
                    let _ = self.ctl(|e| e.delete(self.acceptor.fd()));
                    return;
                }
            }
            if !self.edge() {
                // Level-triggered: one accept per notification; a fuller backlog is reported again.
                return;
            }
        }
    }

    fn on_conn(&mut self, fd: RawFd, ev: EpollFlags) {
        let edge = self.edge();
        let Some(conn) = self.conns.get_mut(fd) else {
            return;
        };
        let step = if edge {
            let peer_closed =
                ev.intersects(EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR);
            conn.on_edge_event(peer_closed, EDGE_READ_BUDGET, &self.proto, self.c)
        } else {
            // A hang-up or error is reported whatever the interest; the next read or write
            // returns it, so it counts as both (otherwise level triggering repeats it forever).
            let failed = ev.intersects(EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR);
            let readable = failed || ev.contains(EpollFlags::EPOLLIN);
            let writable = failed || ev.contains(EpollFlags::EPOLLOUT);
            let was_pending = conn.has_pending();
            let step = conn.on_level_event(readable, writable, &self.proto, self.c);
            let now_pending = step == Step::WantWrite;
            if step != Step::Close && was_pending != now_pending {
                let mut event = EpollEvent::new(conn_interest(Trigger::Level, step), fd as u64);
                self.c.sys(Sys::EpollCtl).inc();
                let t = clock();
                let r = self.epoll.modify(conn.fd(), &mut event);
                self.c.timed(Sys::EpollCtl, t);
                if let Err(e) = r {
                    self.c.error(ErrKind::from_errno(e)).inc();
                    self.close(fd);
                    return;
                }
            }
            step
        };
        match step {
            Step::Close => self.close(fd),
            Step::Yield => self.carry.push(fd),
            Step::WantRead | Step::WantWrite => {}
        }
    }

    fn close(&mut self, fd: RawFd) {
        if let Some(conn) = self.conns.remove(fd) {
            // close(2) also removes the descriptor from the interest set: it is never dup'ed.
            io::close(conn.into_fd(), self.c);
            self.maybe_resume(true);
        }
    }

    fn maybe_resume(&mut self, fd_freed: bool) {
        if self.acceptor.resume(fd_freed) {
            if let Err(e) = self.arm_listener() {
                worker::fatal(
                    "epoll reactor",
                    &anyhow::anyhow!("epoll_ctl(ADD listener): {e}"),
                );
            }
        }
    }
}
