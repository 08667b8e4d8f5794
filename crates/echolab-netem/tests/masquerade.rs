//! `echolab-netem masquerade`, live, in client/link/server network namespaces (root and
//! iproute2 needed): the server must see the client's connections as coming from the link
//! host's server-side address while the table is installed, and from the client's own address
//! once it is removed; another source on the client is never translated.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use echolab_netem::testbed::{Testbed, LINK_SERVER_SIDE, SERVER_ADDR};

const BIN: &str = env!("CARGO_BIN_EXE_echolab-netem");
const DEADLINE: Duration = Duration::from_secs(60);
const PORT: u16 = 7071;
/// The client's address in the testbed, and a second one added on the same device.
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 2);
const OTHER_SOURCE: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 3);
/// The link namespace's address on its server-side device (testbed layout).
const LINK_SERVER_SIDE_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 2, 1);

fn masquerade(tb: &Testbed, args: &[&str]) -> String {
    let mut cmd = tb.command(&tb.lnk, BIN.as_ref());
    cmd.arg("masquerade").args(args);
    let out = Testbed::output_within(cmd, DEADLINE).expect("masquerade finishes");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "masquerade {args:?}: {stderr}");
    stderr
}

/// The link namespace's conntrack table, as the kernel lists it.
fn conntrack(tb: &Testbed) -> String {
    let mut cmd = tb.command(&tb.lnk, "cat".as_ref());
    cmd.arg("/proc/net/nf_conntrack");
    let out = Testbed::output_within(cmd, DEADLINE).expect("cat finishes");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Connects from `source` in the client namespace and returns the peer address the server's
/// accept(2) reports.
fn seen_by_server(tb: &Testbed, listener: &TcpListener, source: Ipv4Addr) -> Ipv4Addr {
    let target = SocketAddr::V4(SocketAddrV4::new(SERVER_ADDR, PORT));
    let stream = tb
        .in_netns(&tb.cli, move || {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            s.bind(&SocketAddr::V4(SocketAddrV4::new(source, 0)).into())?;
            s.connect_timeout(&target.into(), DEADLINE)?;
            Ok::<TcpStream, std::io::Error>(s.into())
        })
        .expect("enter the client namespace")
        .unwrap_or_else(|e| panic!("connect from {source} to {target}: {e}"));
    let (_conn, peer) = listener.accept().expect("accept");
    drop(stream);
    match peer {
        SocketAddr::V4(p) => *p.ip(),
        SocketAddr::V6(p) => panic!("IPv6 peer {p}"),
    }
}

#[test]
fn the_server_sees_the_link_address_only_while_the_client_is_masqueraded() {
    let tb = Testbed::new().expect("namespaces");
    let added = Command::new("ip")
        .args([
            "-n",
            &tb.cli,
            "addr",
            "add",
            &format!("{OTHER_SOURCE}/24"),
            "dev",
            "eth0",
        ])
        .stdin(Stdio::null())
        .status()
        .expect("ip");
    assert!(added.success(), "adding {OTHER_SOURCE} to the client");
    let listener = tb
        .in_netns(&tb.srv, || TcpListener::bind((SERVER_ADDR, PORT)))
        .expect("enter the server namespace")
        .expect("listen");

    assert_eq!(seen_by_server(&tb, &listener, CLIENT), CLIENT, "before");

    let said = masquerade(
        &tb,
        &["--client", &CLIENT.to_string(), "--out", LINK_SERVER_SIDE],
    );
    assert!(
        said.contains(&format!("{CLIENT} out of {LINK_SERVER_SIDE}")),
        "{said}"
    );
    // Installing again replaces the table instead of failing or adding a second rule.
    masquerade(
        &tb,
        &["--client", &CLIENT.to_string(), "--out", LINK_SERVER_SIDE],
    );
    assert_eq!(
        seen_by_server(&tb, &listener, CLIENT),
        LINK_SERVER_SIDE_ADDR,
        "installed"
    );
    assert_eq!(
        seen_by_server(&tb, &listener, OTHER_SOURCE),
        OTHER_SOURCE,
        "only the client's address is translated"
    );

    let client_src = format!("src={CLIENT} ");
    assert!(
        conntrack(&tb).contains(&client_src),
        "the masqueraded connections are tracked: {}",
        conntrack(&tb)
    );
    assert!(masquerade(&tb, &["--remove"]).contains("removed"));
    // Their bindings are forgotten with the table, so no flow stays translated.
    assert!(!conntrack(&tb).contains(&client_src), "{}", conntrack(&tb));
    assert_eq!(seen_by_server(&tb, &listener, CLIENT), CLIENT, "removed");
    assert!(masquerade(&tb, &["--remove"]).contains("nothing to remove"));
}

#[test]
fn a_missing_output_device_is_named_and_nothing_is_installed() {
    let tb = Testbed::new().expect("namespaces");
    let mut cmd = tb.command(&tb.lnk, BIN.as_ref());
    cmd.args([
        "masquerade",
        "--client",
        &CLIENT.to_string(),
        "--out",
        "nodev0",
    ]);
    let out = Testbed::output_within(cmd, DEADLINE).expect("finishes");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("\"nodev0\""), "{stderr}");
    assert!(masquerade(&tb, &["--remove"]).contains("nothing to remove"));
}

#[test]
fn without_cap_net_admin_install_and_remove_fail_at_once_with_the_kernels_refusal() {
    let tb = Testbed::new().expect("namespaces");
    for args in [
        vec!["--client", "10.201.1.2", "--out", LINK_SERVER_SIDE],
        vec!["--remove"],
    ] {
        // The same binary as an unprivileged user with no capabilities (util-linux setpriv).
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &tb.lnk, "setpriv"])
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["--inh-caps=-all", "--bounding-set=-all"])
            .arg(BIN)
            .arg("masquerade")
            .args(&args)
            .stdin(Stdio::null());
        let started = std::time::Instant::now();
        let out = Testbed::output_within(cmd, DEADLINE).expect("finishes");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("(errno {})", libc::EPERM)),
            "{args:?}: {stderr}"
        );
        // An answer, not the 10 s wait for one that never comes.
        assert!(started.elapsed() < Duration::from_secs(5), "{args:?}");
    }
}
