//! The bulkwire wire format: one fixed 64-byte header shared by every protocol,
//! followed by the payload. See docs/protocols.md and the BSPlib paper, section 4.3.
//!
//! ```text
//!  0 magic u16 "BW"   2 version u8   3 kind u8   4 flags u8   5 colour u8   6 credit u16
//!  8 cookie u32      12 src u32     16 dst u32
//! 20 seq u32         24 ack u32     28 eoh u32
//! 32 msg u32         36 len u32     40 offset u64   48 total u64
//! 56 aux u32         60 crc32c u32 (over bytes 0..60 and the payload)
//! ```
//!
//! On a link that others can write to (UDP), a job with a secret authenticates every
//! packet instead: a 64-bit tag over the payload and bytes 0..8 and 12..60, keyed by the
//! job's secret ([`PacketKey`]: SipHash-2-4 for short packets, BLAKE3 for long ones),
//! stands in the cookie's and the CRC's places (bytes 8..12 and 60..64). The tag subsumes both: a packet of another
//! job or a corrupted one fails it like a forged one. Between addresses of one host the
//! tag may cover the header alone, and where no one else can listen, the header and a
//! CRC32C of the payload ([`Cover`]).
//!
//! All fields are little-endian. Decoding is total: every byte string yields either a
//! header and its payload or a [`DropReason`]; nothing here allocates or panics.

use std::fmt;

/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 64;
/// The destination of a packet for every member of a job's multicast group
/// ([`crate::mcast`]): [`decode_group`] accepts it beside the receiver's own rank.
pub const GROUP: u32 = u32::MAX;
/// "BW" in little-endian.
pub const MAGIC: u16 = u16::from_le_bytes(*b"BW");
/// Wire version; bumped on any incompatible change.
pub const VERSION: u8 = 1;

const CRC_AT: usize = 60;
const COOKIE_AT: usize = 8;

/// The key of the per-packet MAC, truncated to 64 bits: SipHash-2-4 (a PRF made for short
/// inputs) over packets with less than [`PacketKey::LONG`] bytes of payload, keyed BLAKE3
/// (SIMD over 1 KiB chunks) over longer ones. Derived from the job's secret by the
/// caller; one per job, shared by its members. Which function tags a packet follows from
/// its length, which the tag covers.
///
/// Truncation to 64 bits keeps the header at 64 bytes; a forger must still guess 2^64
/// tags on average, about 58,000 years at ten million forged datagrams a second. A
/// replayed packet of the job is a duplicate, which every recovering protocol discards.
#[derive(Clone)]
pub struct PacketKey {
    long: [u8; 32],
    short: (u64, u64),
}

impl PacketKey {
    /// Payloads of this many bytes and more are tagged with BLAKE3, shorter ones with
    /// SipHash: SipHash runs at about 2.4 GB/s whatever the length (32 ns for a header
    /// alone, where BLAKE3 takes 60-100), BLAKE3 at 1.2-1.9 GB/s below 4 KiB and 4.4 from
    /// 4 KiB, where it hashes four chunks at once.
    pub const LONG: usize = 4096;

    pub fn new(key: [u8; 32]) -> PacketKey {
        // Two keys for two functions, each derived for its own use.
        let s = blake3::derive_key("bulkwire 1 packet siphash", &key);
        let word = |i: usize| u64::from_le_bytes(s[i..i + 8].try_into().expect("8 bytes"));
        PacketKey {
            long: blake3::derive_key("bulkwire 1 packet blake3", &key),
            short: (word(0), word(8)),
        }
    }

    /// The tag of a packet whose header fields are `head` (cookie and CRC places ignored)
    /// and whose payload is `payload`, covering what `cover` says.
    #[inline]
    fn tag(&self, head: &[u8], payload: &[u8], cover: Cover) -> [u8; 8] {
        let crc;
        let payload = match cover {
            Cover::Payload => payload,
            Cover::Header => &[],
            Cover::HeaderCrc => {
                crc = crc32c::crc32c(payload).to_le_bytes();
                &crc[..]
            }
        };
        if payload.len() < Self::LONG {
            use std::hash::Hasher;
            let mut h = siphasher::sip::SipHasher24::new_with_keys(self.short.0, self.short.1);
            h.write(payload);
            h.write(&head[..COOKIE_AT]);
            h.write(&head[COOKIE_AT + 4..CRC_AT]);
            return h.finish().to_le_bytes();
        }
        let mut h = blake3::Hasher::new_keyed(&self.long);
        // The payload first: BLAKE3 hashes whole 1 KiB chunks many at a time, and a
        // payload that started mid-chunk would add a chunk hashed alone.
        h.update(payload);
        h.update(&head[..COOKIE_AT]);
        h.update(&head[COOKIE_AT + 4..CRC_AT]);
        let mut t = [0u8; 8];
        h.finalize_xof().fill(&mut t);
        t
    }

    /// Whether `dgram`'s tag is right, comparing in constant time (no early exit a forger
    /// could time).
    #[inline]
    fn verify(&self, dgram: &[u8], cover: Cover) -> bool {
        let t = self.tag(&dgram[..HEADER_LEN], &dgram[HEADER_LEN..], cover);
        let got = dgram[COOKIE_AT..COOKIE_AT + 4]
            .iter()
            .chain(&dgram[CRC_AT..HEADER_LEN]);
        t.iter().zip(got).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
    }
}

impl fmt::Debug for PacketKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PacketKey(..)")
    }
}

/// What a packet's MAC covers besides the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cover {
    /// The payload: only the job's members can make a packet that passes, or change one
    /// on the way.
    Payload,
    /// Nothing more, for datagrams between addresses of one host: the kernel hands them
    /// over in its own memory, where no other user can read them, so no one sees a tag to
    /// put on another payload, and without the key no one can make a header that passes.
    /// One SipHash of the header per datagram, whatever its size.
    Header,
    /// A CRC32C of the payload: without the key no one makes a packet that passes, and
    /// corruption is caught; but one who reads the job's datagrams on the way could put a
    /// payload with the same CRC under a tag it has seen. For a network where no one else
    /// can listen (`BULKWIRE_AUTH=header`). A CRC pass (about 20 GB/s) and one SipHash.
    HeaderCrc,
}

/// How a datagram's integrity and origin are checked.
#[derive(Clone, Debug)]
pub enum Integrity {
    /// Nothing beyond the cookie: a link that can neither corrupt nor forge a datagram
    /// (shared memory among the job's processes).
    None,
    /// CRC32C over header and payload, and the cookie: corruption is caught, a forger
    /// who learns the cookie is not.
    Crc,
    /// The per-packet MAC ([`PacketKey`]) over the header and what [`Cover`] says: only
    /// the job's members can make a packet that passes.
    Mac(PacketKey, Cover),
}

impl Integrity {
    /// Encodes `hdr` for `payload` as this check expects.
    #[inline]
    pub fn encode(&self, hdr: &Header, payload: &[u8]) -> [u8; HEADER_LEN] {
        match self {
            Integrity::None => hdr.encode_unchecked(payload),
            Integrity::Crc => hdr.encode(payload),
            Integrity::Mac(k, c) => hdr.encode_mac(payload, k, *c),
        }
    }

    /// Decodes and checks `dgram` as this check expects.
    #[inline]
    pub fn decode<'a>(
        &self,
        dgram: &'a [u8],
        filter: &Filter,
    ) -> Result<(Header, &'a [u8]), DropReason> {
        match self {
            Integrity::None => decode_with(dgram, filter, Check::None),
            Integrity::Crc => decode_with(dgram, filter, Check::Crc),
            Integrity::Mac(k, c) => decode_with(dgram, filter, Check::Mac(k, *c)),
        }
    }

    /// [`Integrity::decode`] for a datagram of the multicast group: addressed to this
    /// rank or to [`GROUP`].
    #[inline]
    pub fn decode_group<'a>(
        &self,
        dgram: &'a [u8],
        filter: &Filter,
    ) -> Result<(Header, &'a [u8]), DropReason> {
        let check = match self {
            Integrity::None => Check::None,
            Integrity::Crc => Check::Crc,
            Integrity::Mac(k, c) => Check::Mac(k, *c),
        };
        decode_addressed(dgram, filter, check, true)
    }

    /// A short name, for reports: `none`, `crc`, `mac`, `mac-header` or `mac-crc`.
    pub fn name(&self) -> &'static str {
        match self {
            Integrity::None => "none",
            Integrity::Crc => "crc",
            Integrity::Mac(_, Cover::Payload) => "mac",
            Integrity::Mac(_, Cover::Header) => "mac-header",
            Integrity::Mac(_, Cover::HeaderCrc) => "mac-crc",
        }
    }
}

/// What a packet is. Protocols use the subset they need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Sequenced data (a fragment of a message).
    Data = 1,
    /// Explicit acknowledgement (no payload).
    Ack = 2,
    /// Negative acknowledgement (gbn: reject; holefill: unused).
    Nack = 3,
    /// Holefill: "tell me where you are" from a receiver waiting for data.
    Prod = 4,
    /// RMPP: request to send (first packet of a message, carries its first bytes).
    Rts = 5,
    /// RMPP: clear to send (a matching receive is posted).
    Cts = 6,
    /// RMPP: request for missing packets.
    Resend = 7,
    /// RMPP: whole-message acknowledgement.
    Fin = 8,
    /// RMPP: close of the connection (acknowledges the Fin).
    Close = 9,
    /// Keep-alive / liveness probe, so silence can be told from death.
    Ping = 10,
    /// Answer to a [`Kind::Ping`].
    Pong = 11,
}

impl Kind {
    /// Decodes a kind byte; `None` for an unknown value.
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Data,
            2 => Kind::Ack,
            3 => Kind::Nack,
            4 => Kind::Prod,
            5 => Kind::Rts,
            6 => Kind::Cts,
            7 => Kind::Resend,
            8 => Kind::Fin,
            9 => Kind::Close,
            10 => Kind::Ping,
            11 => Kind::Pong,
            _ => return None,
        })
    }
}

/// Header flag bits.
pub mod flags {
    /// The receiver should acknowledge this packet explicitly (the BSPlib paper, section 4.4).
    pub const ACK_REQ: u8 = 1 << 0;
    /// Last packet of a phase (superstep) to this peer.
    pub const LAST_OF_PHASE: u8 = 1 << 1;
    /// First fragment of a message.
    pub const FIRST: u8 = 1 << 2;
    /// Last fragment of a message.
    pub const LAST: u8 = 1 << 3;
    /// This packet is a retransmission.
    pub const RETRANSMIT: u8 = 1 << 4;
    /// Every flag bit this version knows; others make the packet malformed.
    pub const KNOWN: u8 = ACK_REQ | LAST_OF_PHASE | FIRST | LAST | RETRANSMIT;
}

/// The decoded fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub flags: u8,
    /// Superstep colour (the BSPlib paper, section 4.4: alternating colours mark barriers).
    pub colour: u8,
    /// Protocol-specific credit (e.g. free receive buffers advertised).
    pub credit: u16,
    pub cookie: u32,
    pub src: u32,
    pub dst: u32,
    pub seq: u32,
    /// Piggybacked acknowledgement: highest in-order sequence received + 1 (next expected).
    pub ack: u32,
    /// End of hole: one past the last sequence held beyond the first gap (holefill).
    pub eoh: u32,
    /// Message number within the ordered pair.
    pub msg: u32,
    /// Payload length.
    pub len: u32,
    /// Byte offset of this payload within its message.
    pub offset: u64,
    /// Total length of the message this payload belongs to.
    pub total: u64,
    /// Protocol-specific word.
    pub aux: u32,
}

impl Header {
    /// A header of `kind` with every other field zero.
    pub fn new(kind: Kind) -> Header {
        Header {
            kind,
            flags: 0,
            colour: 0,
            credit: 0,
            cookie: 0,
            src: 0,
            dst: 0,
            seq: 0,
            ack: 0,
            eoh: 0,
            msg: 0,
            len: 0,
            offset: 0,
            total: 0,
            aux: 0,
        }
    }

    /// Whether `flag` is set.
    #[inline]
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// Encodes the header for `payload`, computing the CRC over both. `self.len` is
    /// overwritten with the payload length.
    #[inline]
    pub fn encode(&self, payload: &[u8]) -> [u8; HEADER_LEN] {
        let mut b = self.fields(payload.len());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b[..CRC_AT]), payload);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Every field but the CRC.
    #[inline]
    fn fields(&self, len: usize) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        b[2] = VERSION;
        b[3] = self.kind as u8;
        b[4] = self.flags;
        b[5] = self.colour;
        b[6..8].copy_from_slice(&self.credit.to_le_bytes());
        b[8..12].copy_from_slice(&self.cookie.to_le_bytes());
        b[12..16].copy_from_slice(&self.src.to_le_bytes());
        b[16..20].copy_from_slice(&self.dst.to_le_bytes());
        b[20..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..28].copy_from_slice(&self.ack.to_le_bytes());
        b[28..32].copy_from_slice(&self.eoh.to_le_bytes());
        b[32..36].copy_from_slice(&self.msg.to_le_bytes());
        b[36..40].copy_from_slice(&(len as u32).to_le_bytes());
        b[40..48].copy_from_slice(&self.offset.to_le_bytes());
        b[48..56].copy_from_slice(&self.total.to_le_bytes());
        b[56..60].copy_from_slice(&self.aux.to_le_bytes());
        b
    }

    /// Encodes the header with a zero CRC, for links that can neither corrupt nor forge a
    /// datagram (see [`decode_unchecked`]). `self.len` is overwritten as in [`Header::encode`].
    #[inline]
    pub fn encode_unchecked(&self, payload: &[u8]) -> [u8; HEADER_LEN] {
        let mut b = self.fields(payload.len());
        b[CRC_AT..].copy_from_slice(&0u32.to_le_bytes());
        b
    }

    /// Encodes the header with a MAC over it and what `cover` says of `payload`, in place
    /// of cookie and CRC (see the module's documentation). `self.len` is overwritten as in
    /// [`Header::encode`].
    #[inline]
    pub fn encode_mac(&self, payload: &[u8], key: &PacketKey, cover: Cover) -> [u8; HEADER_LEN] {
        let mut b = self.fields(payload.len());
        let t = key.tag(&b, payload, cover);
        b[COOKIE_AT..COOKIE_AT + 4].copy_from_slice(&t[..4]);
        b[CRC_AT..].copy_from_slice(&t[4..]);
        b
    }

    /// Encodes header and payload into one contiguous datagram.
    pub fn encode_to_vec(&self, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
        v.extend_from_slice(&self.encode(payload));
        v.extend_from_slice(payload);
        v
    }
}

/// Why a datagram was dropped before reaching a protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Shorter than a header.
    Short,
    /// Not a bulkwire packet at all.
    BadMagic,
    /// A bulkwire packet of another wire version.
    BadVersion,
    /// Unknown kind or flag bits.
    Malformed,
    /// Payload length field disagrees with the datagram.
    BadLength,
    /// CRC32C mismatch: corrupted on the way.
    Crc,
    /// Another job's packet (cookie mismatch).
    Foreign,
    /// Addressed to another rank, or from a rank outside the job.
    Misaddressed,
    /// Failed the per-packet MAC ([`PacketKey`]): forged, corrupted, or another job's.
    Mac,
}

impl DropReason {
    /// Every reason, for reports.
    pub const ALL: [DropReason; 9] = [
        DropReason::Short,
        DropReason::BadMagic,
        DropReason::BadVersion,
        DropReason::Malformed,
        DropReason::BadLength,
        DropReason::Crc,
        DropReason::Foreign,
        DropReason::Misaddressed,
        DropReason::Mac,
    ];

    /// Stable index into counters.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DropReason::Short => "short",
            DropReason::BadMagic => "bad-magic",
            DropReason::BadVersion => "bad-version",
            DropReason::Malformed => "malformed",
            DropReason::BadLength => "bad-length",
            DropReason::Crc => "crc",
            DropReason::Foreign => "foreign",
            DropReason::Misaddressed => "misaddressed",
            DropReason::Mac => "mac",
        })
    }
}

/// Counters of datagrams dropped by [`decode`], by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts(pub [u64; 9]);

impl DropCounts {
    pub fn count(&mut self, r: DropReason) {
        self.0[r.index()] += 1;
    }
    pub fn get(&self, r: DropReason) -> u64 {
        self.0[r.index()]
    }
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    pub fn add(&mut self, o: &DropCounts) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a += b;
        }
    }
}

/// Who may legitimately send to us: our job's cookie, our rank, and the job size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filter {
    pub cookie: u32,
    pub me: u32,
    pub nprocs: u32,
}

#[inline]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Decodes and verifies one datagram. Checks, in order: length, magic, version, kind and
/// flags, payload length, CRC, cookie, addressing. The CRC is checked before the cookie so
/// that a corrupted packet of our own job counts as corruption, not as foreign.
pub fn decode<'a>(dgram: &'a [u8], filter: &Filter) -> Result<(Header, &'a [u8]), DropReason> {
    decode_with(dgram, filter, Check::Crc)
}

/// [`decode`] without the CRC check, for a link that can neither corrupt nor forge a
/// datagram (shared memory among the job's processes): every other check still applies.
pub fn decode_unchecked<'a>(
    dgram: &'a [u8],
    filter: &Filter,
) -> Result<(Header, &'a [u8]), DropReason> {
    decode_with(dgram, filter, Check::None)
}

/// [`decode`] with the per-packet MAC in place of cookie and CRC: a packet that fails it
/// is [`DropReason::Mac`], whatever else is wrong with it beyond its structure.
pub fn decode_mac<'a>(
    dgram: &'a [u8],
    filter: &Filter,
    key: &PacketKey,
) -> Result<(Header, &'a [u8]), DropReason> {
    decode_with(dgram, filter, Check::Mac(key, Cover::Payload))
}

/// [`decode_mac`] for a datagram of the multicast group ([`crate::mcast`]): addressed to
/// this rank or to [`GROUP`]; every other check is the same.
pub fn decode_group<'a>(
    dgram: &'a [u8],
    filter: &Filter,
    key: &PacketKey,
) -> Result<(Header, &'a [u8]), DropReason> {
    decode_addressed(dgram, filter, Check::Mac(key, Cover::Payload), true)
}

#[derive(Clone, Copy)]
enum Check<'k> {
    None,
    Crc,
    /// The MAC, covering the header and what the [`Cover`] says.
    Mac(&'k PacketKey, Cover),
}

#[inline]
fn decode_with<'a>(
    dgram: &'a [u8],
    filter: &Filter,
    check: Check<'_>,
) -> Result<(Header, &'a [u8]), DropReason> {
    decode_addressed(dgram, filter, check, false)
}

#[inline]
fn decode_addressed<'a>(
    dgram: &'a [u8],
    filter: &Filter,
    check: Check<'_>,
    group: bool,
) -> Result<(Header, &'a [u8]), DropReason> {
    if dgram.len() < HEADER_LEN {
        return Err(DropReason::Short);
    }
    if u16::from_le_bytes([dgram[0], dgram[1]]) != MAGIC {
        return Err(DropReason::BadMagic);
    }
    if dgram[2] != VERSION {
        return Err(DropReason::BadVersion);
    }
    let kind = Kind::from_u8(dgram[3]).ok_or(DropReason::Malformed)?;
    let fl = dgram[4];
    if fl & !flags::KNOWN != 0 {
        return Err(DropReason::Malformed);
    }
    let len = u32_at(dgram, 36);
    if len as usize != dgram.len() - HEADER_LEN {
        return Err(DropReason::BadLength);
    }
    let payload = &dgram[HEADER_LEN..];
    let cookie = match check {
        Check::None => u32_at(dgram, COOKIE_AT),
        Check::Crc => {
            if crc32c::crc32c_append(crc32c::crc32c(&dgram[..CRC_AT]), payload)
                != u32_at(dgram, CRC_AT)
            {
                return Err(DropReason::Crc);
            }
            u32_at(dgram, COOKIE_AT)
        }
        Check::Mac(key, cover) => {
            if !key.verify(dgram, cover) {
                return Err(DropReason::Mac);
            }
            // The tag vouches for the job: the cookie's place holds tag bits.
            filter.cookie
        }
    };
    let hdr = Header {
        kind,
        flags: fl,
        colour: dgram[5],
        credit: u16::from_le_bytes([dgram[6], dgram[7]]),
        cookie,
        src: u32_at(dgram, 12),
        dst: u32_at(dgram, 16),
        seq: u32_at(dgram, 20),
        ack: u32_at(dgram, 24),
        eoh: u32_at(dgram, 28),
        msg: u32_at(dgram, 32),
        len,
        offset: u64_at(dgram, 40),
        total: u64_at(dgram, 48),
        aux: u32_at(dgram, 56),
    };
    if hdr.cookie != filter.cookie {
        return Err(DropReason::Foreign);
    }
    let to_us = hdr.dst == filter.me || (group && hdr.dst == GROUP);
    if !to_us || hdr.src >= filter.nprocs || hdr.src == filter.me {
        return Err(DropReason::Misaddressed);
    }
    // A fragment must lie inside its message.
    if hdr
        .offset
        .checked_add(len as u64)
        .is_none_or(|end| end > hdr.total)
        && kind == Kind::Data
    {
        return Err(DropReason::Malformed);
    }
    Ok((hdr, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            kind: Kind::Data,
            flags: flags::FIRST | flags::ACK_REQ,
            colour: 1,
            credit: 77,
            cookie: 0xdead_beef,
            src: 3,
            dst: 1,
            seq: 42,
            ack: 17,
            eoh: 19,
            msg: 9,
            len: 0,
            offset: 1000,
            total: 1005,
            aux: 5,
        }
    }

    const F: Filter = Filter {
        cookie: 0xdead_beef,
        me: 1,
        nprocs: 4,
    };

    #[test]
    fn roundtrip() {
        let h = sample();
        let d = h.encode_to_vec(b"hello");
        let (g, p) = decode(&d, &F).unwrap();
        assert_eq!(p, b"hello");
        assert_eq!(g, Header { len: 5, ..h });
    }

    #[test]
    fn unchecked_roundtrip_still_checks_structure() {
        let h = sample();
        let mut d = h.encode_unchecked(b"hello").to_vec();
        d.extend_from_slice(b"hello");
        let (g, p) = decode_unchecked(&d, &F).unwrap();
        assert_eq!((g, p), (Header { len: 5, ..h }, &b"hello"[..]));
        assert_eq!(decode(&d, &F), Err(DropReason::Crc));
        assert_eq!(
            decode_unchecked(&d[..d.len() - 1], &F),
            Err(DropReason::BadLength)
        );
        let other = Filter { cookie: 1, ..F };
        assert_eq!(decode_unchecked(&d, &other), Err(DropReason::Foreign));
    }

    #[test]
    fn every_single_bit_flip_is_caught() {
        let d = sample().encode_to_vec(b"hello");
        for i in 0..d.len() * 8 {
            let mut c = d.clone();
            c[i / 8] ^= 1 << (i % 8);
            assert!(decode(&c, &F).is_err(), "bit {i} flip accepted");
        }
    }

    fn mac_dgram(h: &Header, payload: &[u8], key: &PacketKey) -> Vec<u8> {
        let mut d = h.encode_mac(payload, key, Cover::Payload).to_vec();
        d.extend_from_slice(payload);
        d
    }

    #[test]
    fn mac_roundtrip_and_every_bit_flip_is_caught() {
        let key = PacketKey::new([7; 32]);
        let h = sample();
        let d = mac_dgram(&h, b"hello", &key);
        let (g, p) = decode_mac(&d, &F, &key).unwrap();
        assert_eq!((g, p), (Header { len: 5, ..h }, &b"hello"[..]));
        // Neither the cookie nor a CRC is on the wire: both places hold the tag.
        assert_ne!(u32_at(&d, COOKIE_AT), h.cookie);
        assert!(decode(&d, &F).is_err());
        for i in 0..d.len() * 8 {
            let mut c = d.clone();
            c[i / 8] ^= 1 << (i % 8);
            assert!(decode_mac(&c, &F, &key).is_err(), "bit {i} flip accepted");
        }
        let mut c = d.clone();
        c[66] ^= 4;
        assert_eq!(decode_mac(&c, &F, &key), Err(DropReason::Mac));
    }

    #[test]
    fn long_payloads_are_tagged_too() {
        // Both functions, each side of the boundary between them.
        let key = PacketKey::new([7; 32]);
        for n in [PacketKey::LONG - 1, PacketKey::LONG, 65_000] {
            let payload: Vec<u8> = (0..n).map(|i| (i * 31) as u8).collect();
            let mut h = sample();
            h.total = h.offset + n as u64;
            let d = mac_dgram(&h, &payload, &key);
            let (g, p) = decode_mac(&d, &F, &key).unwrap();
            assert_eq!((g.len as usize, p), (n, &payload[..]));
            for i in (0..d.len() * 8).step_by(97) {
                let mut c = d.clone();
                c[i / 8] ^= 1 << (i % 8);
                assert!(
                    decode_mac(&c, &F, &key).is_err(),
                    "{n} B: bit {i} flip accepted"
                );
            }
        }
    }

    #[test]
    fn mac_refuses_another_key_a_crc_packet_and_a_forged_tag() {
        let key = PacketKey::new([7; 32]);
        let h = sample();
        let theirs = mac_dgram(&h, b"hello", &PacketKey::new([8; 32]));
        assert_eq!(decode_mac(&theirs, &F, &key), Err(DropReason::Mac));
        // A forger who knows the cookie and the CRC makes a perfect CRC packet: refused.
        let crc = h.encode_to_vec(b"hello");
        assert_eq!(decode_mac(&crc, &F, &key), Err(DropReason::Mac));
        // The tag covers every field but its own places, so a tag cut from one packet
        // does not fit another header or another payload.
        let d = mac_dgram(&h, b"hello", &key);
        let mut other = mac_dgram(&Header { seq: 43, ..h }, b"hello", &key);
        other[COOKIE_AT..COOKIE_AT + 4].copy_from_slice(&d[COOKIE_AT..COOKIE_AT + 4]);
        other[CRC_AT..HEADER_LEN].copy_from_slice(&d[CRC_AT..HEADER_LEN]);
        assert_eq!(decode_mac(&other, &F, &key), Err(DropReason::Mac));
        let mut spliced = d.clone();
        spliced[HEADER_LEN..].copy_from_slice(b"jello");
        assert_eq!(decode_mac(&spliced, &F, &key), Err(DropReason::Mac));
        // Structure is still checked first, and addressing after the tag.
        assert_eq!(decode_mac(&d[..10], &F, &key), Err(DropReason::Short));
        let not_me = Filter { me: 2, ..F };
        assert_eq!(decode_mac(&d, &not_me, &key), Err(DropReason::Misaddressed));
        assert_eq!(format!("{key:?}"), "PacketKey(..)");
    }

    #[test]
    fn integrity_modes_round_trip_through_one_interface() {
        let h = sample();
        for i in [
            Integrity::None,
            Integrity::Crc,
            Integrity::Mac(PacketKey::new([3; 32]), Cover::Payload),
            Integrity::Mac(PacketKey::new([3; 32]), Cover::Header),
            Integrity::Mac(PacketKey::new([3; 32]), Cover::HeaderCrc),
        ] {
            let mut d = i.encode(&h, b"abc").to_vec();
            d.extend_from_slice(b"abc");
            let (g, p) = i.decode(&d, &F).unwrap();
            assert_eq!(
                (g, p),
                (Header { len: 3, ..h }, &b"abc"[..]),
                "{}",
                i.name()
            );
        }
        // Over the header alone: every header bit is covered, the payload is not (it
        // travels where no one else can read or change it).
        let k = PacketKey::new([3; 32]);
        let i = Integrity::Mac(k.clone(), Cover::Header);
        let mut d = i.encode(&h, b"abc").to_vec();
        d.extend_from_slice(b"abc");
        for bit in 0..HEADER_LEN * 8 {
            let mut c = d.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(i.decode(&c, &F).is_err(), "header bit {bit} flip accepted");
        }
        assert_eq!(decode_mac(&d, &F, &k), Err(DropReason::Mac));
        // Over the header and the payload's CRC: every bit of both is covered.
        let i = Integrity::Mac(k, Cover::HeaderCrc);
        let mut d = i.encode(&h, b"abc").to_vec();
        d.extend_from_slice(b"abc");
        for bit in 0..d.len() * 8 {
            let mut c = d.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(i.decode(&c, &F).is_err(), "bit {bit} flip accepted");
        }
    }

    #[test]
    fn reasons() {
        let d = sample().encode_to_vec(b"hello");
        assert_eq!(decode(&d[..10], &F), Err(DropReason::Short));
        assert_eq!(decode(&d[..d.len() - 1], &F), Err(DropReason::BadLength));
        let mut c = d.clone();
        c[0] = 0;
        assert_eq!(decode(&c, &F), Err(DropReason::BadMagic));
        let mut c = d.clone();
        c[2] = 9;
        assert_eq!(decode(&c, &F), Err(DropReason::BadVersion));
        let mut c = d.clone();
        c[66] ^= 4;
        assert_eq!(decode(&c, &F), Err(DropReason::Crc));
        let other = Filter { cookie: 1, ..F };
        assert_eq!(decode(&d, &other), Err(DropReason::Foreign));
        let not_me = Filter { me: 2, ..F };
        assert_eq!(decode(&d, &not_me), Err(DropReason::Misaddressed));
        let small = Filter { nprocs: 3, ..F };
        assert_eq!(decode(&d, &small), Err(DropReason::Misaddressed));
        let mut h = sample();
        h.offset = 1001; // 1001 + 5 > 1005
        assert_eq!(
            decode(&h.encode_to_vec(b"hello"), &F),
            Err(DropReason::Malformed)
        );
    }

    proptest::proptest! {
        /// Decoding is total: arbitrary bytes, and valid packets with arbitrary damage,
        /// give a packet or a drop reason; never a panic. Whatever decodes re-encodes to
        /// the same bytes.
        #[test]
        fn decode_is_total(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
                           flips in proptest::collection::vec((0usize..200, 0u8..8), 0..4),
                           payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..100)) {
            let _ = decode(&bytes, &F);
            let mut h = sample();
            h.total = h.offset + payload.len() as u64;
            let mut d = h.encode_to_vec(&payload);
            for (at, bit) in &flips {
                let n = d.len();
                d[at % n] ^= 1 << bit;
            }
            match decode(&d, &F) {
                Ok((g, p)) => proptest::prop_assert_eq!(g.encode_to_vec(p), d),
                Err(_) => proptest::prop_assert!(!flips.is_empty()),
            }
            let key = PacketKey::new([5; 32]);
            let _ = decode_mac(&bytes, &F, &key);
            let mut m = h.encode_mac(&payload, &key, Cover::Payload).to_vec();
            m.extend_from_slice(&payload);
            for (at, bit) in &flips {
                let n = m.len();
                m[at % n] ^= 1 << bit;
            }
            match decode_mac(&m, &F, &key) {
                Ok((g, p)) => {
                    let mut again = g.encode_mac(p, &key, Cover::Payload).to_vec();
                    again.extend_from_slice(p);
                    proptest::prop_assert_eq!(again, m)
                }
                Err(_) => proptest::prop_assert!(!flips.is_empty()),
            }
        }
    }
}
