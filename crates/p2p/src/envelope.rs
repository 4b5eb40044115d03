//! The envelope: what p2p puts in front of (or sends instead of) user data, on top of the
//! transport's reliable, per-pair ordered messages.
//!
//! | kind | bytes | meaning |
//! |---|---|---|
//! | `EAGER` | 8 + payload | a whole message: header then the user's bytes |
//! | `RTS` | 32 | request to send: tag, length, the sender's request, its buffer address |
//! | `CTS` | 24 | clear to send: the sender's request, the receiver's request |
//! | `FIN` | 16 | the receiver is done with a rendezvous (read it in place, or refused it) |
//! | `DATA` | 24 | the next message from this peer is the raw body for a receive |
//! | `SPLIT` | 32 | split copy: the receiver reads the body up to `at` in place; the sender writes the rest to the receiver's buffer at `addr` |
//! | `WROTE` | 16 | split copy: the sender has written its part (flag `F_FAILED`: it could not) |
//!
//! Common first 8 bytes: kind, flags, version, zero, tag (i32). Integers are little-endian.
//! Decoding is total: any byte string gives an envelope or a reason, never a panic.

use bytes::{BufMut, Bytes, BytesMut};

pub const VERSION: u8 = 1;

pub const EAGER: u8 = 1;
pub const RTS: u8 = 2;
pub const CTS: u8 = 3;
pub const FIN: u8 = 4;
pub const DATA: u8 = 5;
pub const SPLIT: u8 = 6;
pub const WROTE: u8 = 7;

/// RTS: the sender's buffer may be read in place (`addr` is meaningful).
pub const F_READABLE: u8 = 1;
/// WROTE: the sender could not write its part; the receiver copies it.
pub const F_FAILED: u8 = 1;

/// Bytes before an eager message's payload.
pub const EAGER_HDR: usize = 8;
pub const RTS_LEN: usize = 32;
pub const CTS_LEN: usize = 24;
pub const FIN_LEN: usize = 16;
pub const DATA_LEN: usize = 24;
pub const SPLIT_LEN: usize = 32;
pub const WROTE_LEN: usize = 16;
/// The longest fixed envelope: an RMPP announcement's head must hold this much (or the
/// whole message) for p2p to match on it.
pub const MAX_ENVELOPE: usize = RTS_LEN;

/// A decoded envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Envelope {
    /// Payload follows the header.
    Eager {
        tag: i32,
    },
    Rts {
        tag: i32,
        len: u64,
        sreq: u64,
        /// The sender's buffer, when it may be read in place.
        addr: Option<u64>,
    },
    Cts {
        sreq: u64,
        rreq: u64,
    },
    Fin {
        sreq: u64,
    },
    Data {
        rreq: u64,
        len: u64,
    },
    /// The receiver of the rendezvous `sreq` reads its first `at` bytes; the sender is to
    /// write the rest to `addr + at` in the receiver's memory.
    Split {
        sreq: u64,
        addr: u64,
        at: u64,
    },
    /// The sender of `sreq` is done writing its part of a split copy (`ok`: it did).
    Wrote {
        sreq: u64,
        ok: bool,
    },
}

/// Why bytes are not an envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    Short,
    Version,
    Kind,
    Length,
    Tag,
    Reserved,
}

/// Whether a tag on the wire is acceptable: user tags are `0..=i32::MAX`, p2p's own
/// traffic uses `i32::MIN..=-2`; -1 is the wildcard and never a message's tag.
pub fn wire_tag_ok(tag: i32) -> bool {
    tag != -1
}

/// Number of tags reserved for the collectives layer (`bulkwire-collectives`): the lowest
/// `COLL_TAGS` negative tags, `i32::MIN..i32::MIN + COLL_TAGS`. Like every negative tag
/// they are never matched by a wildcard receive and a user cannot send or receive them
/// (the user API refuses negative tags), so a collective's messages never meet the user's
/// point-to-point traffic; only [`crate::Comm::isend_coll_raw`] and
/// [`crate::Comm::irecv_coll_raw`] take them. The rest of the negative range stays p2p's.
pub const COLL_TAGS: u32 = 1 << 30;

/// The `n`-th collectives tag (`n` taken modulo [`COLL_TAGS`]).
pub fn coll_tag(n: u32) -> i32 {
    i32::MIN + (n % COLL_TAGS) as i32
}

/// Whether `tag` is in the collectives' reserved range.
pub fn is_coll_tag(tag: i32) -> bool {
    (tag as i64) < i32::MIN as i64 + COLL_TAGS as i64
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Decodes the envelope at the start of `b` (which may be only an announced head: an
/// eager envelope needs 8 bytes, the others their whole length).
pub fn decode(b: &[u8]) -> Result<Envelope, Bad> {
    if b.len() < EAGER_HDR {
        return Err(Bad::Short);
    }
    let (kind, flags, ver, zero) = (b[0], b[1], b[2], b[3]);
    if ver != VERSION {
        return Err(Bad::Version);
    }
    if zero != 0 {
        return Err(Bad::Reserved);
    }
    let tag = i32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let exact = |n: usize| {
        if b.len() == n {
            Ok(())
        } else {
            Err(Bad::Length)
        }
    };
    match kind {
        EAGER => {
            if flags != 0 {
                return Err(Bad::Reserved);
            }
            if !wire_tag_ok(tag) {
                return Err(Bad::Tag);
            }
            Ok(Envelope::Eager { tag })
        }
        RTS => {
            exact(RTS_LEN)?;
            if flags & !F_READABLE != 0 {
                return Err(Bad::Reserved);
            }
            if !wire_tag_ok(tag) {
                return Err(Bad::Tag);
            }
            Ok(Envelope::Rts {
                tag,
                len: u64_at(b, 8),
                sreq: u64_at(b, 16),
                addr: (flags & F_READABLE != 0).then(|| u64_at(b, 24)),
            })
        }
        CTS => {
            exact(CTS_LEN)?;
            if flags != 0 || tag != 0 {
                return Err(Bad::Reserved);
            }
            Ok(Envelope::Cts {
                sreq: u64_at(b, 8),
                rreq: u64_at(b, 16),
            })
        }
        FIN => {
            exact(FIN_LEN)?;
            if flags != 0 || tag != 0 {
                return Err(Bad::Reserved);
            }
            Ok(Envelope::Fin { sreq: u64_at(b, 8) })
        }
        DATA => {
            exact(DATA_LEN)?;
            if flags != 0 || tag != 0 {
                return Err(Bad::Reserved);
            }
            Ok(Envelope::Data {
                rreq: u64_at(b, 8),
                len: u64_at(b, 16),
            })
        }
        SPLIT => {
            exact(SPLIT_LEN)?;
            if flags != 0 || tag != 0 {
                return Err(Bad::Reserved);
            }
            Ok(Envelope::Split {
                sreq: u64_at(b, 8),
                addr: u64_at(b, 16),
                at: u64_at(b, 24),
            })
        }
        WROTE => {
            exact(WROTE_LEN)?;
            if flags & !F_FAILED != 0 || tag != 0 {
                return Err(Bad::Reserved);
            }
            Ok(Envelope::Wrote {
                sreq: u64_at(b, 8),
                ok: flags & F_FAILED == 0,
            })
        }
        _ => Err(Bad::Kind),
    }
}

fn head(out: &mut BytesMut, kind: u8, flags: u8, tag: i32) {
    out.put_slice(&[kind, flags, VERSION, 0]);
    out.put_i32_le(tag);
}

/// An eager message: header and a copy of `payload`, in one allocation.
pub fn eager(tag: i32, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(EAGER_HDR + payload.len());
    head(&mut b, EAGER, 0, tag);
    b.put_slice(payload);
    b.freeze()
}

/// Encodes a control envelope (anything but eager).
pub fn control(e: &Envelope) -> Bytes {
    let mut b = BytesMut::with_capacity(MAX_ENVELOPE);
    match *e {
        Envelope::Eager { tag } => head(&mut b, EAGER, 0, tag),
        Envelope::Rts {
            tag,
            len,
            sreq,
            addr,
        } => {
            head(
                &mut b,
                RTS,
                if addr.is_some() { F_READABLE } else { 0 },
                tag,
            );
            b.put_u64_le(len);
            b.put_u64_le(sreq);
            b.put_u64_le(addr.unwrap_or(0));
        }
        Envelope::Cts { sreq, rreq } => {
            head(&mut b, CTS, 0, 0);
            b.put_u64_le(sreq);
            b.put_u64_le(rreq);
        }
        Envelope::Fin { sreq } => {
            head(&mut b, FIN, 0, 0);
            b.put_u64_le(sreq);
        }
        Envelope::Data { rreq, len } => {
            head(&mut b, DATA, 0, 0);
            b.put_u64_le(rreq);
            b.put_u64_le(len);
        }
        Envelope::Split { sreq, addr, at } => {
            head(&mut b, SPLIT, 0, 0);
            b.put_u64_le(sreq);
            b.put_u64_le(addr);
            b.put_u64_le(at);
        }
        Envelope::Wrote { sreq, ok } => {
            head(&mut b, WROTE, if ok { 0 } else { F_FAILED }, 0);
            b.put_u64_le(sreq);
        }
    }
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coll_tags_are_reserved_and_distinct_from_user_tags() {
        assert_eq!(coll_tag(0), i32::MIN);
        assert_eq!(coll_tag(COLL_TAGS - 1), i32::MIN + (COLL_TAGS as i32 - 1));
        assert_eq!(coll_tag(COLL_TAGS), coll_tag(0));
        for n in [0, 1, 77, COLL_TAGS - 1, u32::MAX] {
            let t = coll_tag(n);
            assert!(is_coll_tag(t) && t < -1 && wire_tag_ok(t), "{n}");
        }
        for t in [-2, -1, 0, 5, i32::MAX, i32::MIN + COLL_TAGS as i32] {
            assert!(!is_coll_tag(t), "{t}");
        }
    }

    #[test]
    fn round_trips() {
        let all = [
            Envelope::Rts {
                tag: 7,
                len: 1 << 40,
                sreq: 0xdead_beef_0000_0001,
                addr: Some(0x7fff_0000_1000),
            },
            Envelope::Rts {
                tag: i32::MAX,
                len: 0,
                sreq: 1,
                addr: None,
            },
            Envelope::Cts { sreq: 3, rreq: 4 },
            Envelope::Fin { sreq: 5 },
            Envelope::Data { rreq: 6, len: 77 },
            Envelope::Split {
                sreq: 8,
                addr: 0x7fff_0000_2000,
                at: 1 << 19,
            },
            Envelope::Wrote { sreq: 9, ok: true },
            Envelope::Wrote { sreq: 9, ok: false },
        ];
        for e in all {
            assert_eq!(decode(&control(&e)), Ok(e));
        }
        let m = eager(-5, b"hello");
        assert_eq!(decode(&m), Ok(Envelope::Eager { tag: -5 }));
        assert_eq!(&m[EAGER_HDR..], b"hello");
        // A head cut short: eager matches on 8 bytes, an RTS needs all of it.
        assert_eq!(decode(&m[..8]), Ok(Envelope::Eager { tag: -5 }));
        let rts = control(&all[0]);
        assert_eq!(decode(&rts[..20]), Err(Bad::Length));
    }

    #[test]
    fn rejects_nonsense_without_panicking() {
        assert_eq!(decode(&[]), Err(Bad::Short));
        assert_eq!(decode(&eager(-1, b"")), Err(Bad::Tag));
        let mut v = eager(1, b"x").to_vec();
        v[2] = 9;
        assert_eq!(decode(&v), Err(Bad::Version));
        let mut v = control(&Envelope::Fin { sreq: 1 }).to_vec();
        v[0] = 99;
        assert_eq!(decode(&v), Err(Bad::Kind));
        v[0] = CTS;
        assert_eq!(decode(&v), Err(Bad::Length));
        // Every byte string of a few lengths decodes or is refused: no panic.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for n in 0..200 {
            let b: Vec<u8> = (0..n % 40)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 7) as u8
                })
                .collect();
            let _ = decode(&b);
        }
    }
}
