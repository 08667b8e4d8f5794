//! The reactor on a loopback listener in this process, with the kernel features forced on
//! or off, so that the single-shot fallbacks run on a kernel that has everything. Each
//! reactor thread serves until the test process exits (nextest runs one test per process).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use echolab_core::protocol::reply_body;

use super::features::Features;
use super::reactor::{pool_buffers, Config, Reactor, POOL_MAX_BUFS, POOL_MIN_BUFS, RING_MAX_BUF};
use crate::counters::{alloc_shared, ErrKind, Op, WorkerCounters};

/// Generous: the machine has two cores shared with builds and other tests.
const DEADLINE: Duration = Duration::from_secs(60);

/// The four combinations of the multishot features, all without the recv byte limit (the
/// tests of the limit set it themselves).
const ALL_FEATURES: [Features; 4] = [
    Features {
        multishot_accept: true,
        multishot_recv: true,
        recv_limit: false,
    },
    Features {
        multishot_accept: true,
        multishot_recv: false,
        recv_limit: false,
    },
    Features {
        multishot_accept: false,
        multishot_recv: true,
        recv_limit: false,
    },
    Features {
        multishot_accept: false,
        multishot_recv: false,
        recv_limit: false,
    },
];

struct Server {
    addr: SocketAddr,
    counters: &'static WorkerCounters,
}

fn serve(
    features: Features,
    read_buf: usize,
    reply_bytes: Option<usize>,
    pool_buffers: u16,
) -> Server {
    serve_on(
        TcpListener::bind("127.0.0.1:0").unwrap(),
        features,
        read_buf,
        reply_bytes,
        pool_buffers,
    )
}

/// A listener whose accepted sockets have a `rcvbuf`-byte receive buffer (inherited from
/// the listener; the kernel doubles the value, socket(7)), which also bounds what a
/// multishot recv can find queued in one reactor turn.
fn small_rcvbuf_listener(rcvbuf: usize) -> TcpListener {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(rcvbuf).unwrap();
    s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    s.listen(16).unwrap();
    s.into()
}

fn serve_on(
    listener: TcpListener,
    features: Features,
    read_buf: usize,
    reply_bytes: Option<usize>,
    pool_buffers: u16,
) -> Server {
    let addr = listener.local_addr().unwrap();
    let counters = &alloc_shared(1).unwrap()[0];
    let config = Config {
        read_buf,
        reply_bytes,
        features,
        pool_buffers,
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let reactor = Reactor::new(listener, &config, counters)
            .expect("io_uring reactor (is io_uring allowed here?)");
        tx.send(()).unwrap();
        reactor.run()
    });
    rx.recv_timeout(DEADLINE).expect("reactor set up");
    Server { addr, counters }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s
}

/// Polls `cond` until it holds or [`DEADLINE`] passes.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Sends `data` from one thread while this one reads it back after `start_reading` holds,
/// sampling the bytes the server holds (read but not yet sent) meanwhile; returns the echo
/// and the largest holding seen.
fn echo_with_late_reader(
    server: &Server,
    data: Vec<u8>,
    start_reading: impl Fn() -> bool,
) -> (Vec<u8>, u64) {
    let mut stream = connect(server.addr);
    let mut writer = stream.try_clone().unwrap();
    let len = data.len();
    let sender = std::thread::spawn(move || writer.write_all(&data).map(|()| writer));
    let c = server.counters;
    // bytes_in is read before bytes_out, so a sample never overstates the holding.
    let held = || c.bytes_in.get().saturating_sub(c.bytes_out.get());
    let mut max_held = 0;
    wait_for(
        "the server to stop receiving for a reader that does not read",
        || {
            max_held = max_held.max(held());
            start_reading()
        },
    );
    let mut back = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let n = stream.read(&mut back[got..(got + 4096).min(len)]).unwrap();
        assert!(n > 0, "server closed after {got} of {len} bytes");
        got += n;
        max_held = max_held.max(held());
    }
    let writer = sender.join().unwrap().unwrap();
    drop(writer);
    (back, max_held)
}

#[test]
fn echoes_requests_larger_than_the_read_buffer_in_every_mode() {
    for features in ALL_FEATURES {
        let server = serve(features, 4096, None, 64);
        let clients: Vec<_> = (0..3u8)
            .map(|i| {
                let data = pattern(64 << 10, i);
                let mut s = connect(server.addr);
                s.write_all(&data).unwrap();
                (s, data)
            })
            .collect();
        for (mut s, data) in clients {
            let mut back = vec![0u8; data.len()];
            s.read_exact(&mut back).unwrap();
            assert!(back == data, "{features:?}: echo differs");
        }
        let c = server.counters;
        let multi = |op| c.op(op).get() > 0;
        assert_eq!(
            (multi(Op::AcceptMulti), multi(Op::Accept)),
            (features.multishot_accept, !features.multishot_accept),
            "{features:?}"
        );
        assert_eq!(
            (multi(Op::RecvMulti), multi(Op::Recv)),
            (features.multishot_recv, !features.multishot_recv),
            "{features:?}"
        );
        assert_eq!(c.bytes_in.get(), 3 * (64 << 10));
    }
}

#[test]
fn closes_after_flushing_when_the_client_half_closes() {
    for features in [ALL_FEATURES[0], ALL_FEATURES[3]] {
        let server = serve(features, 4096, None, 64);
        let mut s = connect(server.addr);
        let data = pattern(300_000, 7);
        s.write_all(&data).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut back = Vec::new();
        s.read_to_end(&mut back).unwrap();
        assert!(
            back == data,
            "{features:?}: {} of {} bytes before EOF",
            back.len(),
            data.len()
        );
        wait_for("the server to count the close", || {
            server.counters.closed.get() == 1
        });
    }
}

#[test]
fn reply_mode_answers_every_newline_even_split_across_reads() {
    for features in [ALL_FEATURES[0], ALL_FEATURES[3]] {
        let server = serve(features, 16, Some(1000), 64);
        let mut s = connect(server.addr);
        s.write_all(b"hello echo\r\nhel").unwrap();
        s.write_all(b"lo\n\nno newline yet").unwrap();
        let mut back = vec![0u8; 3000];
        s.read_exact(&mut back).unwrap();
        assert!(back == reply_body(1000).repeat(3), "{features:?}");
    }
}

#[test]
fn slow_reader_gets_every_byte_while_the_server_holds_little_and_serves_others() {
    let read_buf = 4096;
    let total = 8 << 20;
    // An uncapped multishot server would hold nearly all 8 MiB the client has not read; a
    // capped one holds MAX_HELD_BUFS buffers plus what one turn finds in a 64 KiB socket
    // buffer. 1 MiB separates the two with a wide margin for a loaded machine.
    let bound = 1 << 20;
    for features in [ALL_FEATURES[0], ALL_FEATURES[1]] {
        let server = serve_on(
            small_rcvbuf_listener(32 << 10),
            features,
            read_buf,
            None,
            4096,
        );
        let c = server.counters;
        let data = pattern(total, 3);
        let other = server.addr;
        let start_reading = || {
            let stalled = if features.multishot_recv {
                c.op(Op::Cancel).get() > 0
            } else {
                // A single-shot server holds one buffer by construction; read once the
                // client is well ahead of the echo.
                c.bytes_in.get() >= 1 << 20
            };
            if stalled {
                // Another client is served while the slow one holds its share.
                let mut s = connect(other);
                s.write_all(b"meanwhile\n").unwrap();
                let mut back = [0u8; 10];
                s.read_exact(&mut back).unwrap();
                assert_eq!(&back, b"meanwhile\n");
            }
            stalled
        };
        let (back, max_held) = echo_with_late_reader(&server, data.clone(), start_reading);
        assert!(back == data, "{features:?}: echo differs");
        // The other client's 10 bytes are in the counters too.
        let bound = if features.multishot_recv {
            bound
        } else {
            read_buf as u64 + 10
        };
        assert!(
            max_held <= bound,
            "{features:?}: server held {max_held} bytes, bound {bound}"
        );
    }
}

#[test]
fn an_empty_buffer_ring_is_counted_and_every_connection_still_gets_its_echo() {
    // 16 buffers, while three non-reading clients may each hold MAX_HELD_BUFS (8).
    let server = serve(ALL_FEATURES[0], 4096, None, 16);
    let c = server.counters;
    let datas: Vec<Vec<u8>> = (0..3).map(|i| pattern(2 << 20, i)).collect();
    let mut streams = Vec::new();
    let mut senders = Vec::new();
    for data in &datas {
        let s = connect(server.addr);
        let mut w = s.try_clone().unwrap();
        let d = data.clone();
        senders.push(std::thread::spawn(move || w.write_all(&d).map(|()| w)));
        streams.push(s);
    }
    wait_for("the ring to run dry", || {
        c.error(ErrKind::RecvBufferExhausted).get() > 0
    });
    let readers: Vec<_> = streams
        .into_iter()
        .zip(datas)
        .map(|(mut s, data)| {
            std::thread::spawn(move || {
                let mut back = vec![0u8; data.len()];
                s.read_exact(&mut back).unwrap();
                back == data
            })
        })
        .collect();
    for r in readers {
        assert!(r.join().unwrap(), "an echo differs");
    }
    for s in senders {
        s.join().unwrap().unwrap();
    }
}

#[test]
fn a_client_reset_with_output_pending_is_closed_and_the_next_client_served() {
    for features in [ALL_FEATURES[0], ALL_FEATURES[3]] {
        let server = serve_on(small_rcvbuf_listener(32 << 10), features, 4096, None, 64);
        let c = server.counters;
        let s = connect(server.addr);
        socket2::SockRef::from(&s)
            .set_recv_buffer_size(4096)
            .unwrap();
        s.set_nonblocking(true).unwrap();
        let chunk = pattern(64 << 10, 1);
        let mut sent = 0usize;
        // Fill both directions until the server holds echo output it cannot send. A full
        // send buffer alone is not enough: the server may still drain it into its own
        // (autotuned, megabytes) send buffer, so keep writing until it holds bytes.
        let start = Instant::now();
        while c.bytes_in.get() <= c.bytes_out.get() {
            match (&s).write(&chunk) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{features:?}: send: {e}"),
            }
            assert!(
                sent < 64 << 20,
                "{features:?}: the server never stopped reading"
            );
            assert!(
                start.elapsed() < DEADLINE,
                "{features:?}: the server never held output"
            );
        }
        socket2::SockRef::from(&s)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(s);
        wait_for("the reset connection to be closed", || c.closed.get() == 1);
        let errors = c.error(ErrKind::Econnreset).get() + c.error(ErrKind::Epipe).get();
        assert!(errors >= 1, "{features:?}: the reset was not counted");
        let mut next = connect(server.addr);
        next.write_all(b"after the reset\n").unwrap();
        let mut back = [0u8; 16];
        next.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"after the reset\n");
    }
}

#[test]
fn pool_sizes_are_powers_of_two_within_bounds() {
    assert_eq!(pool_buffers(4096), 1024);
    assert_eq!(pool_buffers(16 << 10), 256);
    assert_eq!(pool_buffers(RING_MAX_BUF), POOL_MIN_BUFS as u16);
    assert_eq!(pool_buffers(64 << 20), POOL_MIN_BUFS as u16);
    assert_eq!(pool_buffers(1), POOL_MAX_BUFS as u16);
    assert!(pool_buffers(5000).is_power_of_two());
}

/// Writes to `s` (made non-blocking) until it has not become writable again for 300 ms: the
/// server stopped reading it and the buffers on the way are full. Returns the bytes written.
fn fill_without_reading(s: &TcpStream) -> usize {
    s.set_nonblocking(true).unwrap();
    let chunk = pattern(64 << 10, 9);
    let mut sent = 0;
    let start = Instant::now();
    loop {
        match (&*s).write(&chunk) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fd = libc::pollfd {
                    fd: std::os::fd::AsRawFd::as_raw_fd(s),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one live pollfd, read and written by poll(2) only.
                if unsafe { libc::poll(&mut fd, 1, 300) } == 0 {
                    return sent;
                }
            }
            Err(e) => panic!("send: {e}"),
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the server never stopped reading"
        );
    }
}

#[test]
fn clients_that_hold_the_whole_ring_leave_the_others_served_from_their_own_buffers() {
    // 16 buffers of 4 KiB; four non-readers may hold MAX_HELD_BUFS (8) each, twice the ring.
    let server = serve(ALL_FEATURES[0], 4096, None, 16);
    let c = server.counters;
    let hogs: Vec<TcpStream> = (0..4).map(|_| connect(server.addr)).collect();
    for h in &hogs {
        fill_without_reading(h);
    }
    let held = c.bytes_in.get() - c.bytes_out.get();
    let mut fresh = connect(server.addr);
    for i in 0..5 {
        let msg = format!("after the ring ran dry {i}\n").into_bytes();
        fresh.write_all(&msg).unwrap();
        let mut back = vec![0u8; msg.len()];
        fresh.read_exact(&mut back).unwrap();
        assert_eq!(back, msg);
    }
    assert!(
        c.error(ErrKind::RecvBufferExhausted).get() > 0,
        "the hogs never emptied the ring (held {held} bytes)"
    );
    assert!(
        c.op(Op::Recv).get() > 0,
        "no receive into a connection's own buffer"
    );
    // What the server holds is bounded by the ring plus one own buffer per connection.
    let bound = (16 + 5) * 4096;
    assert!(held <= bound, "held {held} bytes, bound {bound}");
    drop(hogs);
}

#[test]
fn with_the_recv_byte_limit_a_non_reader_holds_at_most_its_share() {
    if !Features::detect().recv_limit {
        eprintln!("this kernel has no multishot recv byte limit (Linux 6.17); nothing to check");
        return;
    }
    let features = Features {
        recv_limit: true,
        ..ALL_FEATURES[0]
    };
    let server = serve(features, 4096, None, 1024);
    let c = server.counters;
    let hog = connect(server.addr);
    let sent = fill_without_reading(&hog);
    let held = c.bytes_in.get() - c.bytes_out.get();
    // The ring has room for 4 MiB, so only the limit keeps the share at MAX_HELD_BUFS buffers.
    let share = (super::reactor::MAX_HELD_BUFS * 4096) as u64;
    assert!(
        held <= share,
        "held {held} bytes after the client sent {sent}, share {share}"
    );
    assert!(
        held > 0,
        "the server held nothing: the client's bytes went elsewhere"
    );
    drop(hog);
}
