//! The kernel's own source NAT for a link across machines: an nftables table in the link
//! host's namespace that masquerades the client host's address to the link host's address on
//! its way out, so that the server's machine can answer a client it has no route to. With it,
//! kernel netem can carry a link across machines (the userspace wire translates by itself,
//! `crate::wire::nat`), and the baseline RTT can be measured from the client host through the
//! link host's plain forwarding.
//!
//! What is installed, in `nft` terms (nft(8)):
//!
//! ```text
//! table ip echolab-masquerade {
//!     chain postrouting {
//!         type nat hook postrouting priority srcnat; policy accept;
//!         oif OUT ip saddr CLIENT masquerade
//!     }
//! }
//! ```
//!
//! It is sent over `NETLINK_NETFILTER` as one nfnetlink batch, so no `nft` binary is needed in
//! the image. Message and attribute layouts follow linux/netfilter/nfnetlink.h and
//! linux/netfilter/nf_tables.h; nftables' numbers in attributes are big-endian, except the
//! register contents compared against (an interface index is in host order, an address in
//! network order). Masquerading needs conntrack in the namespace (`CONFIG_NFT_MASQ`), which
//! the kernel loads on first use.

use std::net::Ipv4Addr;

use crate::nl::{Message, NlError, Socket, NLM_F_ACK, NLM_F_CREATE, NLM_F_REQUEST};

/// The table's name: one table holds the whole rule, so removing it removes everything.
pub const TABLE: &str = "echolab-masquerade";
const CHAIN: &str = "postrouting";

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFPROTO_IPV4: u8 = 2;
const NLM_F_APPEND: u16 = 0x800;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFTA_PAYLOAD_DREG: u16 = 1;
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFTA_DATA_VALUE: u16 = 1;

/// `NF_INET_POST_ROUTING`.
const HOOK_POSTROUTING: u32 = 4;
/// `NF_IP_PRI_NAT_SRC`, nft's `srcnat`.
const PRIORITY_SRCNAT: i32 = 100;
/// `NFT_REG_1`: a 16-byte register.
const REG_1: u32 = 1;
/// `NFT_META_OIF`: the output interface's index.
const META_OIF: u32 = 5;
/// `NFT_PAYLOAD_NETWORK_HEADER`.
const BASE_NETWORK: u32 = 1;
/// The IPv4 header's source address: offset 12, 4 bytes (RFC 791).
const IPV4_SADDR_OFFSET: u32 = 12;
/// `NFT_CMP_EQ`.
const CMP_EQ: u32 = 0;

/// The `nfgenmsg` header: family, version 0, resource id (big-endian).
fn nfgen(family: u8, res_id: u16) -> [u8; 4] {
    let r = res_id.to_be_bytes();
    [family, 0, r[0], r[1]]
}

fn nft_message(kind: u16, flags: u16, seq: u32) -> Message {
    Message::new(
        (NFNL_SUBSYS_NFTABLES << 8) | kind,
        NLM_F_REQUEST | NLM_F_ACK | flags,
        seq,
        &nfgen(NFPROTO_IPV4, 0),
    )
}

fn batch_marker(kind: u16, seq: u32) -> Message {
    Message::new(kind, NLM_F_REQUEST, seq, &nfgen(0, NFNL_SUBSYS_NFTABLES))
}

fn be32(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

fn table_message(kind: u16, flags: u16, seq: u32) -> Message {
    let mut m = nft_message(kind, flags, seq);
    m.attr_str(NFTA_TABLE_NAME, TABLE);
    m
}

fn chain_message(seq: u32) -> Message {
    let mut m = nft_message(NFT_MSG_NEWCHAIN, NLM_F_CREATE, seq);
    m.attr_str(NFTA_CHAIN_TABLE, TABLE)
        .attr_str(NFTA_CHAIN_NAME, CHAIN)
        .begin_nest(NFTA_CHAIN_HOOK, &[], true)
        .attr(NFTA_HOOK_HOOKNUM, &be32(HOOK_POSTROUTING))
        .attr(NFTA_HOOK_PRIORITY, &PRIORITY_SRCNAT.to_be_bytes())
        .end_nest()
        .attr_str(NFTA_CHAIN_TYPE, "nat");
    m
}

/// Opens one expression of a rule: `{NFTA_EXPR_NAME, NFTA_EXPR_DATA {...}}`; the caller adds
/// the data's attributes and closes both nests.
fn begin_expr<'m>(m: &'m mut Message, name: &str) -> &'m mut Message {
    m.begin_nest(NFTA_LIST_ELEM, &[], true)
        .attr_str(NFTA_EXPR_NAME, name)
        .begin_nest(NFTA_EXPR_DATA, &[], true)
}

/// `cmp eq reg 1 VALUE`.
fn cmp_eq(m: &mut Message, value: &[u8]) {
    begin_expr(m, "cmp")
        .attr(NFTA_CMP_SREG, &be32(REG_1))
        .attr(NFTA_CMP_OP, &be32(CMP_EQ))
        .begin_nest(NFTA_CMP_DATA, &[], true)
        .attr(NFTA_DATA_VALUE, value)
        .end_nest()
        .end_nest()
        .end_nest();
}

fn rule_message(client: Ipv4Addr, out_ifindex: u32, seq: u32) -> Message {
    let mut m = nft_message(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, seq);
    m.attr_str(NFTA_RULE_TABLE, TABLE)
        .attr_str(NFTA_RULE_CHAIN, CHAIN)
        .begin_nest(NFTA_RULE_EXPRESSIONS, &[], true);
    begin_expr(&mut m, "meta")
        .attr(NFTA_META_DREG, &be32(REG_1))
        .attr(NFTA_META_KEY, &be32(META_OIF))
        .end_nest()
        .end_nest();
    cmp_eq(&mut m, &out_ifindex.to_ne_bytes());
    begin_expr(&mut m, "payload")
        .attr(NFTA_PAYLOAD_DREG, &be32(REG_1))
        .attr(NFTA_PAYLOAD_BASE, &be32(BASE_NETWORK))
        .attr(NFTA_PAYLOAD_OFFSET, &be32(IPV4_SADDR_OFFSET))
        .attr(NFTA_PAYLOAD_LEN, &be32(4))
        .end_nest()
        .end_nest();
    cmp_eq(&mut m, &client.octets());
    begin_expr(&mut m, "masq").end_nest().end_nest();
    m.end_nest();
    m
}

/// The batch that installs the table from scratch: create the table (a no-op when it exists),
/// delete it with whatever it holds, create it again with the chain and the rule. Installing
/// twice is the same as once.
fn install_batch(client: Ipv4Addr, out_ifindex: u32, sock: &mut Socket) -> Vec<Message> {
    vec![
        batch_marker(NFNL_MSG_BATCH_BEGIN, sock.next_seq()),
        table_message(NFT_MSG_NEWTABLE, NLM_F_CREATE, sock.next_seq()),
        table_message(NFT_MSG_DELTABLE, 0, sock.next_seq()),
        table_message(NFT_MSG_NEWTABLE, NLM_F_CREATE, sock.next_seq()),
        chain_message(sock.next_seq()),
        rule_message(client, out_ifindex, sock.next_seq()),
        batch_marker(NFNL_MSG_BATCH_END, sock.next_seq()),
    ]
}

/// An error of [`install`] or [`remove`].
#[derive(Debug, thiserror::Error)]
pub enum MasqueradeError {
    /// The output device does not exist, or no netfilter socket could be opened.
    #[error("{0}")]
    Io(std::io::Error),
    /// The kernel refused a request, or did not answer; [`hint`] says what a refusal usually
    /// means.
    #[error("{error}{}", hint(.error))]
    Netlink {
        /// The refusal.
        #[from]
        error: NlError,
    },
}

/// What a refusal usually means here: no permission, or a kernel without nf_tables NAT (an
/// expression or chain type the kernel cannot load, such as `masq` without CONFIG_NFT_MASQ,
/// is refused with ENOENT; [`remove`] handles its own ENOENT, a missing table, first).
fn hint(e: &NlError) -> &'static str {
    match e.errno {
        libc::EPERM | libc::EACCES => " (needs CAP_NET_ADMIN in this network namespace)",
        libc::ENOENT | libc::EOPNOTSUPP | libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT => {
            " (needs a kernel with nf_tables NAT: CONFIG_NF_TABLES, CONFIG_NFT_MASQ)"
        }
        _ => "",
    }
}

fn netfilter_socket() -> Result<Socket, MasqueradeError> {
    Socket::open_protocol(libc::NETLINK_NETFILTER).map_err(|e| {
        MasqueradeError::Io(std::io::Error::new(
            e.kind(),
            format!("opening a NETLINK_NETFILTER socket (nf_tables is needed): {e}"),
        ))
    })
}

/// Masquerades packets from `client` that leave through `out_dev` to `out_dev`'s address, in
/// the caller's network namespace, replacing an earlier install.
///
/// # Errors
/// No device `out_dev`; the kernel refused the batch (nothing of it is installed then).
pub fn install(client: Ipv4Addr, out_dev: &str) -> Result<(), MasqueradeError> {
    let out = crate::nl::ifindex(out_dev).map_err(MasqueradeError::Io)?;
    let mut sock = netfilter_socket()?;
    let batch = install_batch(client, out, &mut sock);
    sock.request_batch(
        &batch,
        &format!("install nftables table {TABLE} masquerading {client} out of {out_dev}"),
    )?;
    Ok(())
}

/// `NFNL_SUBSYS_CTNETLINK`, and its `IPCTNL_MSG_CT_DELETE` (linux/netfilter/nfnetlink_conntrack.h).
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const AF_INET: u8 = 2;

/// Removes what [`install`] installed, and forgets the translations it made: deleting the
/// table leaves each masqueraded connection's binding in its conntrack entry, which would go
/// on translating that flow (wherever anything else in the namespace uses NAT, as Docker's
/// embedded DNS does in a container), so the namespace's IPv4 conntrack table is flushed too.
/// The link host's namespace carries only the run's traffic, and nothing flows when the
/// launcher removes the masquerade. Returns false when there was no table to remove.
///
/// # Errors
/// The kernel refused for another reason than a missing table.
pub fn remove() -> Result<bool, MasqueradeError> {
    let mut sock = netfilter_socket()?;
    let batch = vec![
        batch_marker(NFNL_MSG_BATCH_BEGIN, sock.next_seq()),
        table_message(NFT_MSG_DELTABLE, 0, sock.next_seq()),
        batch_marker(NFNL_MSG_BATCH_END, sock.next_seq()),
    ];
    let removed = match sock.request_batch(&batch, &format!("delete nftables table {TABLE}")) {
        Ok(()) => true,
        Err(e) if e.errno == libc::ENOENT => false,
        Err(e) => return Err(e.into()),
    };
    let flush = Message::new(
        (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE,
        NLM_F_REQUEST | NLM_F_ACK,
        sock.next_seq(),
        &nfgen(AF_INET, 0),
    );
    sock.request(&flush, "flush this namespace's IPv4 conntrack table")?;
    Ok(removed)
}
