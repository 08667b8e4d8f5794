//! The `user_data` of io_uring operations: which kind of operation a completion ends, for
//! which connection slot, and which arm of it.

/// What a completion belongs to: the low [`KIND_BITS`] bits of `user_data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub(super) enum Kind {
    Accept = 0,
    AcceptBackoff = 1,
    Recv = 2,
    Send = 3,
    Cancel = 4,
    Close = 5,
}

pub(super) const KIND_BITS: u32 = 3;
pub(super) const SLOT_BITS: u32 = 29;

/// `user_data` layout: kind (3 bits) | connection slot (29 bits) | tag (32 bits). The tag is the
/// connection's generation for sends and the arm number for receives, so a completion can be
/// matched to the exact operation it ends.
pub(super) fn user_data(kind: Kind, slot: usize, tag: u32) -> u64 {
    debug_assert!(slot < 1 << SLOT_BITS);
    kind as u64 | (slot as u64) << KIND_BITS | u64::from(tag) << (KIND_BITS + SLOT_BITS)
}

pub(super) fn split_user_data(data: u64) -> (Option<Kind>, usize, u32) {
    let kind = match data & ((1 << KIND_BITS) - 1) {
        0 => Some(Kind::Accept),
        1 => Some(Kind::AcceptBackoff),
        2 => Some(Kind::Recv),
        3 => Some(Kind::Send),
        4 => Some(Kind::Cancel),
        5 => Some(Kind::Close),
        _ => None,
    };
    let slot = ((data >> KIND_BITS) & ((1 << SLOT_BITS) - 1)) as usize;
    (kind, slot, (data >> (KIND_BITS + SLOT_BITS)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_round_trips() {
        let data = user_data(Kind::Send, (1 << SLOT_BITS) - 1, u32::MAX);
        assert_eq!(
            split_user_data(data),
            (Some(Kind::Send), (1 << SLOT_BITS) - 1, u32::MAX)
        );
        assert_eq!(
            split_user_data(user_data(Kind::Accept, 0, 0)),
            (Some(Kind::Accept), 0, 0)
        );
        assert_eq!(split_user_data(7).0, None);
    }
}
