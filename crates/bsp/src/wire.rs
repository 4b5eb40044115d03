//! What the BSP layer puts in transport messages. Every message starts with its kind and
//! the superstep it belongs to, so that messages of the next superstep (a process may run
//! one barrier ahead) are told apart from those of the current one.
//!
//! - `REDUCE` (kind, step, round, summaries, pushes, cells): one round of the barrier
//!   (see `Core::reduce`): at most two [`Summary`]s, the registration sizes known so far,
//!   and the cells of the communication matrix routed through the receiver.
//! - `DATA` (kind, step, records): a chunk of the superstep's puts, get requests and BSMP
//!   sends for one destination, as records (see [`Rec`]).
//! - `REPLY` (kind, step, bytes): the values read for a DATA chunk's get requests,
//!   concatenated in request order.
//! - `DGET` (kind, step, slot, offset, len): a `bsp_direct_get` to be answered at once,
//!   whatever the server is doing; `DREPLY` (kind, step, status, server's
//!   [`Published`](bulkwire_engine::vm::Published), bytes) answers it.
//! - `LEND` (kind, step, sender's `Published`, length of the DATA message it stands for,
//!   then per put: slot, offset, length, address in the sender): a message of large puts
//!   to a process of the same host, left in the sender's memory for the receiver to read
//!   in place (see `Core::lend`); `LENT` (kind, step, what, status) says it has been
//!   read, or that the receiver cannot read it and wants the DATA message instead.
//! - `LEND_REPLY` (kind, step, server's `Published`, then per get request: address in the
//!   server, length): the answer to large get requests from a process of the same host,
//!   which reads the values in place (see `Core::lend_reply`) and answers `LENT` too.
//!
//! Integers are LEB128 varints. Decoding is total: malformed input gives `None`, never a
//! panic, and the caller turns it into an error naming the sender.

use bulkwire_engine::vm::Published;

pub const REDUCE: u8 = 1;
pub const DATA: u8 = 2;
pub const REPLY: u8 = 3;
pub const DGET: u8 = 4;
pub const DREPLY: u8 = 5;
pub const LEND: u8 = 6;
pub const LENT: u8 = 7;
pub const LEND_REPLY: u8 = 8;

/// What a `LENT` answers: a `LEND` (puts) or a `LEND_REPLY` (get values).
pub const LENT_PUTS: u8 = 0;
pub const LENT_REPLY: u8 = 1;

/// `LENT` status: read; cannot be read in place (send the DATA or REPLY message).
pub const LENT_OK: u8 = 0;
pub const LENT_REFUSED: u8 = 1;

/// `DREPLY` status: the bytes follow; the request named no live registration or fell
/// outside it.
pub const DREPLY_OK: u8 = 0;
pub const DREPLY_UNREGISTERED: u8 = 1;
pub const DREPLY_BOUNDS: u8 = 2;

/// Bytes of the kind-and-step header of every message.
pub const HEAD: usize = 5;

pub const REC_PUT: u8 = 1;
pub const REC_GET: u8 = 2;
pub const REC_SEND: u8 = 3;

/// Appends `v` as a LEB128 varint.
#[inline]
pub fn put_var(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// The longest head of a record: its kind and three 64-bit varints.
pub const MAX_REC_HEAD: usize = 1 + 3 * 10;

/// Appends the head of a record: its kind and three varints. A small put's head fits 8
/// bytes: it is assembled in a register and stored at once (written byte by byte it
/// costs a capacity check per byte).
#[inline]
pub fn put_rec_head(buf: &mut Vec<u8>, kind: u8, a: u64, b: u64, c: u64) {
    if let (Some((x, nx)), Some((y, ny)), Some((z, nz))) = (short(a), short(b), short(c))
        && 1 + nx + ny + nz <= 8
    {
        let w = kind as u64 | x << 8 | y << (8 * (1 + nx)) | z << (8 * (1 + nx + ny));
        buf.reserve(8);
        let len = buf.len();
        // SAFETY: `reserve(8)` left at least 8 bytes of capacity past `len`; the length
        // grows by the `1 + nx + ny + nz <= 8` bytes written.
        unsafe {
            buf.as_mut_ptr()
                .add(len)
                .cast::<[u8; 8]>()
                .write_unaligned(w.to_le_bytes());
            buf.set_len(len + (1 + nx + ny + nz) as usize);
        }
        return;
    }
    put_rec_head_long(buf, kind, a, b, c)
}

/// `v` as a varint of at most 3 bytes, in the low bytes of a word, and its length.
#[inline]
fn short(v: u64) -> Option<(u64, u32)> {
    if v < 1 << 7 {
        Some((v, 1))
    } else if v < 1 << 14 {
        Some((v & 0x7f | 0x80 | (v >> 7) << 8, 2))
    } else if v < 1 << 21 {
        Some((
            v & 0x7f | 0x80 | ((v >> 7) & 0x7f | 0x80) << 8 | (v >> 14) << 16,
            3,
        ))
    } else {
        None
    }
}

#[cold]
fn put_rec_head_long(buf: &mut Vec<u8>, kind: u8, a: u64, b: u64, c: u64) {
    buf.push(kind);
    for v in [a, b, c] {
        put_var(buf, v);
    }
}

/// Appends `bytes`; a word without a call of memcpy.
#[inline]
pub fn append(buf: &mut Vec<u8>, bytes: &[u8]) {
    match <[u8; 8]>::try_from(bytes) {
        Ok(w) => buf.extend_from_slice(&w),
        Err(_) => buf.extend_from_slice(bytes),
    }
}

/// Bytes `v` takes as a varint.
#[inline]
pub fn var_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Appends a message header.
pub fn put_head(buf: &mut Vec<u8>, kind: u8, step: u32) {
    buf.push(kind);
    buf.extend_from_slice(&step.to_le_bytes());
}

/// Kind and step of a message.
pub fn head(msg: &[u8]) -> Option<(u8, u32)> {
    let k = *msg.first()?;
    let s = u32::from_le_bytes(msg.get(1..HEAD)?.try_into().ok()?);
    Some((k, s))
}

/// A cursor over received bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    pub fn at(buf: &'a [u8], pos: usize) -> Reader<'a> {
        Reader { buf, pos }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// Where the next read starts.
    #[inline]
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Moves to `pos` (a position a decoder of this buffer returned).
    #[inline]
    pub fn skip_to(&mut self, pos: usize) {
        self.pos = pos;
    }

    #[inline]
    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    #[inline]
    pub fn var(&mut self) -> Option<u64> {
        // Slots and word lengths take one byte, offsets within 16 KiB two.
        let b = *self.buf.get(self.pos)?;
        if b < 0x80 {
            self.pos += 1;
            return Some(b as u64);
        }
        if let Some(&c) = self.buf.get(self.pos + 1)
            && c < 0x80
        {
            self.pos += 2;
            return Some((b & 0x7f) as u64 | (c as u64) << 7);
        }
        self.var_long()
    }

    fn var_long(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// A varint that must fit a `usize`.
    #[inline]
    pub fn size(&mut self) -> Option<usize> {
        usize::try_from(self.var()?).ok()
    }

    /// The range of the next `n` bytes, skipped.
    #[inline]
    pub fn take(&mut self, n: usize) -> Option<std::ops::Range<usize>> {
        let end = self.pos.checked_add(n)?;
        if end > self.buf.len() {
            return None;
        }
        let r = self.pos..end;
        self.pos = end;
        Some(r)
    }

    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let r = self.take(n)?;
        Some(&self.buf[r])
    }
}

/// One record of a DATA chunk, with ranges into the chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rec {
    Put {
        slot: u32,
        offset: usize,
        data: std::ops::Range<usize>,
    },
    Get {
        slot: u32,
        offset: usize,
        len: usize,
    },
    Send {
        tag: std::ops::Range<usize>,
        payload: std::ops::Range<usize>,
    },
}

/// The small put record at `pos`, decoded from one 8-byte load: slot under 128, offset
/// under 16 KiB, length under 128 (bspbench's words, and most small puts). Returns the
/// slot, the offset and the data's range; `None` for any other record, or one that runs
/// past the buffer (the general reader takes those).
#[inline]
pub fn small_put(buf: &[u8], pos: usize) -> Option<(u32, usize, std::ops::Range<usize>)> {
    let w = u64::from_le_bytes(buf.get(pos..pos.checked_add(8)?)?.try_into().ok()?);
    let byte = |i: usize| (w >> (8 * i)) as u8;
    if byte(0) != REC_PUT || byte(1) >= 0x80 {
        return None;
    }
    let (offset, at) = if byte(2) < 0x80 {
        (byte(2) as usize, 3)
    } else if byte(3) < 0x80 {
        ((byte(2) & 0x7f) as usize | (byte(3) as usize) << 7, 4)
    } else {
        return None;
    };
    let len = byte(at);
    if len >= 0x80 {
        return None;
    }
    let start = pos + at + 1;
    let end = start + len as usize;
    (end <= buf.len()).then_some((byte(1) as u32, offset, start..end))
}

/// Reads the next record of a chunk; `None` at the end, `Some(Err(()))` if malformed.
#[inline]
pub fn next_rec(r: &mut Reader<'_>) -> Option<Result<Rec, ()>> {
    if r.is_empty() {
        return None;
    }
    Some(read_rec(r).ok_or(()))
}

#[inline]
fn read_rec(r: &mut Reader<'_>) -> Option<Rec> {
    match r.u8()? {
        REC_PUT => {
            let slot = u32::try_from(r.var()?).ok()?;
            let offset = r.size()?;
            let len = r.size()?;
            Some(Rec::Put {
                slot,
                offset,
                data: r.take(len)?,
            })
        }
        REC_GET => Some(Rec::Get {
            slot: u32::try_from(r.var()?).ok()?,
            offset: r.size()?,
            len: r.size()?,
        }),
        REC_SEND => {
            let tl = r.size()?;
            let tag = r.take(tl)?;
            let pl = r.size()?;
            Some(Rec::Send {
                tag,
                payload: r.take(pl)?,
            })
        }
        _ => None,
    }
}

/// One put of a `LEND` message: where it goes in the receiver, where its bytes lie in
/// the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LentPut {
    pub slot: u32,
    pub offset: usize,
    pub len: usize,
    pub addr: u64,
}

impl LentPut {
    /// Bytes of this put as a record of a DATA message; `None` past `usize`.
    pub fn record_len(&self) -> Option<usize> {
        let head =
            1 + var_len(self.slot as u64) + var_len(self.offset as u64) + var_len(self.len as u64);
        self.len.checked_add(head)
    }
}

/// A `LEND` message: the sender's published identity, the length of the DATA message it
/// stands for and the puts.
pub fn lend_msg(step: u32, who: &[u8; Published::LEN], total: u64, puts: &[LentPut]) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEAD + Published::LEN + 10 + puts.len() * 16);
    put_head(&mut m, LEND, step);
    m.extend_from_slice(who);
    put_var(&mut m, total);
    for p in puts {
        put_var(&mut m, p.slot as u64);
        put_var(&mut m, p.offset as u64);
        put_var(&mut m, p.len as u64);
        put_var(&mut m, p.addr);
    }
    m
}

/// Decodes a `LEND` message; `None` if malformed.
pub fn parse_lend(m: &[u8]) -> Option<(Published, u64, Vec<LentPut>)> {
    let mut r = Reader::at(m, HEAD);
    let who = Published::from_bytes(r.bytes(Published::LEN)?)?;
    let total = r.var()?;
    let mut puts = Vec::new();
    while !r.is_empty() {
        puts.push(LentPut {
            slot: u32::try_from(r.var()?).ok()?,
            offset: r.size()?,
            len: r.size()?,
            addr: r.var()?,
        });
    }
    Some((who, total, puts))
}

/// A `LENT` message: what it answers, and how.
pub fn lent_msg(step: u32, what: u8, status: u8) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEAD + 2);
    put_head(&mut m, LENT, step);
    m.push(what);
    m.push(status);
    m
}

/// A `LEND_REPLY` message: the server's published identity and, per get request in
/// order, where its value lies in the server and its length.
pub fn lend_reply_msg(step: u32, who: &[u8; Published::LEN], values: &[(u64, usize)]) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEAD + Published::LEN + values.len() * 12);
    put_head(&mut m, LEND_REPLY, step);
    m.extend_from_slice(who);
    for &(addr, len) in values {
        put_var(&mut m, addr);
        put_var(&mut m, len as u64);
    }
    m
}

/// Decodes a `LEND_REPLY` message; `None` if malformed.
pub fn parse_lend_reply(m: &[u8]) -> Option<(Published, Vec<(u64, usize)>)> {
    let mut r = Reader::at(m, HEAD);
    let who = Published::from_bytes(r.bytes(Published::LEN)?)?;
    let mut values = Vec::new();
    while !r.is_empty() {
        values.push((r.var()?, r.size()?));
    }
    Some((who, values))
}

/// A registration operation as every process reports it to the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegOp {
    /// `bsp_push_reg` of an area of `size` bytes at `addr` in the pusher (the address
    /// serves `bsp_direct_get`, and tells which pushes were of NULL).
    Push { size: u64, addr: u64 },
    /// `bsp_pop_reg` of the registration in this slot.
    Pop(u32),
    /// `bsp_pop_reg(NULL)`: pops whatever the processes that name an address pop.
    PopNull,
}

const OP_PUSH: u64 = 0;
const OP_POP: u64 = 1;
const OP_POP_NULL: u64 = 2;

/// The collective calls of one process's superstep, which every process checks against
/// the others': whether it is in `bsp_end`, its registration calls (a push's size and
/// address are left out: they may differ, and travel apart) and the tag size it set.
/// Equal summaries encode to equal bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// The process is in `bsp_end`, not `bsp_sync`.
    pub ending: bool,
    /// Registration calls of the superstep, in call order (pushes with size and address
    /// 0).
    pub ops: Vec<RegOp>,
    /// `bsp_set_tagsize` of the superstep, if called.
    pub tagsize: Option<u64>,
}

const F_ENDING: u8 = 1;
const F_OPS: u8 = 2;
const F_TAGSIZE: u8 = 4;

impl Summary {
    pub fn encode(&self, buf: &mut Vec<u8>) {
        let mut f = 0;
        if self.ending {
            f |= F_ENDING;
        }
        if !self.ops.is_empty() {
            f |= F_OPS;
        }
        if self.tagsize.is_some() {
            f |= F_TAGSIZE;
        }
        buf.push(f);
        if !self.ops.is_empty() {
            put_var(buf, self.ops.len() as u64);
            for op in &self.ops {
                match *op {
                    RegOp::Push { size, addr } => {
                        put_var(buf, OP_PUSH);
                        put_var(buf, size);
                        put_var(buf, addr);
                    }
                    RegOp::Pop(s) => put_var(buf, (s as u64) << 2 | OP_POP),
                    RegOp::PopNull => put_var(buf, OP_POP_NULL),
                }
            }
        }
        if let Some(t) = self.tagsize {
            put_var(buf, t);
        }
    }

    pub fn decode(b: &[u8]) -> Option<Summary> {
        let mut r = Reader::new(b);
        let f = r.u8()?;
        let mut ops = Vec::new();
        if f & F_OPS != 0 {
            let n = r.size()?;
            // Each op takes at least a byte: a count beyond the input is a lie.
            if n > b.len() {
                return None;
            }
            ops.reserve(n);
            for _ in 0..n {
                let v = r.var()?;
                ops.push(match v & 3 {
                    OP_PUSH if v == OP_PUSH => RegOp::Push {
                        size: r.var()?,
                        addr: r.var()?,
                    },
                    OP_POP => RegOp::Pop(u32::try_from(v >> 2).ok()?),
                    OP_POP_NULL if v == OP_POP_NULL => RegOp::PopNull,
                    _ => return None,
                });
            }
        }
        let tagsize = if f & F_TAGSIZE != 0 {
            Some(r.var()?)
        } else {
            None
        };
        r.is_empty().then_some(Summary {
            ending: f & F_ENDING != 0,
            ops,
            tagsize,
        })
    }
}

/// One cell of the communication matrix on its way to its column: `src` sends `bytes` of
/// DATA to `dst` this superstep, with get requests among them if `gets`; by the job's
/// multicast group if `mcast` (the same message to every other process: a broadcast).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub gets: bool,
    pub mcast: bool,
}

/// What one round of the barrier carries (see `Core::reduce`): at most two summaries
/// with their pids, the push sizes known so far, and the matrix cells routed through the
/// receiver.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reduce<'a> {
    pub round: u8,
    pub summaries: Vec<(u32, &'a [u8])>,
    pub pushes: Vec<(u32, Vec<u64>)>,
    pub cells: Vec<Cell>,
}

/// Encodes a REDUCE message.
pub fn reduce_msg<'a>(
    step: u32,
    round: u8,
    summaries: &[(u32, Vec<u8>)],
    pushes: impl ExactSizeIterator<Item = (u32, &'a [u64])>,
    cells: &[Cell],
) -> Vec<u8> {
    let mut buf = Vec::with_capacity(HEAD + 16 + 8 * cells.len());
    put_head(&mut buf, REDUCE, step);
    buf.push(round);
    put_var(&mut buf, summaries.len() as u64);
    for (pid, s) in summaries {
        put_var(&mut buf, *pid as u64);
        put_var(&mut buf, s.len() as u64);
        buf.extend_from_slice(s);
    }
    put_var(&mut buf, pushes.len() as u64);
    for (pid, sizes) in pushes {
        put_var(&mut buf, pid as u64);
        put_var(&mut buf, sizes.len() as u64);
        for &z in sizes {
            put_var(&mut buf, z);
        }
    }
    put_var(&mut buf, cells.len() as u64);
    for c in cells {
        put_var(&mut buf, c.src as u64);
        put_var(&mut buf, c.dst as u64);
        put_var(
            &mut buf,
            c.bytes << 2 | (c.mcast as u64) << 1 | c.gets as u64,
        );
    }
    buf
}

/// Decodes a REDUCE message of a job of `p` processes. Counts are bounded by the bytes
/// left (every item takes at least one), pids by `p`; a cell from a process to itself is
/// nonsense.
pub fn parse_reduce(msg: &[u8], p: u32) -> Option<Reduce<'_>> {
    let mut r = Reader::at(msg, HEAD);
    let pid = |r: &mut Reader<'_>| u32::try_from(r.var()?).ok().filter(|&x| x < p);
    let round = r.u8()?;
    let n = r.size()?.min(msg.len());
    let mut summaries = Vec::with_capacity(n);
    for _ in 0..n {
        let who = pid(&mut r)?;
        let len = r.size()?;
        summaries.push((who, r.bytes(len)?));
    }
    let n = r.size()?.min(msg.len());
    let mut pushes = Vec::with_capacity(n);
    for _ in 0..n {
        let who = pid(&mut r)?;
        let k = r.size()?;
        if k > msg.len() {
            return None;
        }
        let sizes = (0..k).map(|_| r.var()).collect::<Option<Vec<u64>>>()?;
        pushes.push((who, sizes));
    }
    let n = r.size()?.min(msg.len());
    let mut cells = Vec::with_capacity(n);
    for _ in 0..n {
        let src = pid(&mut r)?;
        let dst = pid(&mut r).filter(|&d| d != src)?;
        let v = r.var()?;
        cells.push(Cell {
            src,
            dst,
            bytes: v >> 2,
            gets: v & 1 == 1,
            mcast: v & 2 == 2,
        });
    }
    r.is_empty().then_some(Reduce {
        round,
        summaries,
        pushes,
        cells,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_var(&mut b, v);
            assert_eq!(b.len(), var_len(v));
            assert_eq!(Reader::new(&b).var(), Some(v));
        }
        // Eleven continuation bytes never end.
        assert_eq!(Reader::new(&[0xff; 11]).var(), None);
    }

    #[test]
    fn summaries_round_trip_and_reject_nonsense() {
        let sum = Summary {
            ending: true,
            ops: vec![
                RegOp::Push {
                    size: 8,
                    addr: 0x7fff_1234_5678,
                },
                RegOp::Pop(2),
                RegOp::PopNull,
                RegOp::Push { size: 0, addr: 0 },
            ],
            tagsize: Some(4),
        };
        let mut b = Vec::new();
        sum.encode(&mut b);
        assert_eq!(Summary::decode(&b), Some(sum));
        assert_eq!(Summary::decode(&b[..b.len() - 1]), None);
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(Summary::decode(&longer), None);
        let mut empty = Vec::new();
        Summary::default().encode(&mut empty);
        assert_eq!(empty, vec![0]);
    }

    #[test]
    fn decoding_anything_never_panics() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = Summary::decode(&bytes);
            let _ = parse_reduce(&bytes, 8);
            let _ = parse_lend(&bytes);
            let _ = parse_lend_reply(&bytes);
            let _ = head(&bytes);
            let mut r = Reader::new(&bytes);
            while let Some(Ok(_)) = next_rec(&mut r) {}
        }
    }

    #[test]
    fn lend_messages_carry_the_lender_and_its_puts() {
        let who = Published {
            pid: 4242,
            token_addr: 0x7fff_0000_1000,
            token: 0x1234_5678_9abc_def1,
        };
        let puts = [
            LentPut {
                slot: 3,
                offset: 1 << 20,
                len: 300_000,
                addr: 0x5555_0000_0010,
            },
            LentPut {
                slot: 0,
                offset: 0,
                len: 1,
                addr: u64::MAX,
            },
        ];
        let total = HEAD + puts.iter().map(|p| p.record_len().unwrap()).sum::<usize>();
        // A put's record: kind, three varints (slot, offset, length), the bytes.
        assert_eq!(
            total,
            HEAD + (1 + 1 + 3 + 3 + 300_000) + (1 + 1 + 1 + 1 + 1)
        );
        let m = lend_msg(9, &who.to_bytes(), total as u64, &puts);
        assert_eq!(head(&m), Some((LEND, 9)));
        assert_eq!(parse_lend(&m), Some((who, total as u64, puts.to_vec())));
        assert!(parse_lend(&m[..m.len() - 1]).is_none(), "a put cut short");
        assert!(
            parse_lend(&m[..HEAD + 10]).is_none(),
            "the lender cut short"
        );
        let none = lend_msg(9, &who.to_bytes(), 5, &[]);
        assert_eq!(parse_lend(&none), Some((who, 5, vec![])));
        let huge = LentPut {
            len: usize::MAX,
            ..puts[1]
        };
        assert_eq!(huge.record_len(), None);
        assert_eq!(
            lent_msg(9, LENT_REPLY, LENT_REFUSED),
            vec![LENT, 9, 0, 0, 0, LENT_REPLY, LENT_REFUSED]
        );
        let values = [(0x7f00_0000_0000u64, 1 << 20), (1, 0)];
        let m = lend_reply_msg(3, &who.to_bytes(), &values);
        assert_eq!(head(&m), Some((LEND_REPLY, 3)));
        assert_eq!(parse_lend_reply(&m), Some((who, values.to_vec())));
        assert!(parse_lend_reply(&m[..m.len() - 1]).is_none());
    }

    #[test]
    fn reduce_messages_carry_summaries_pushes_and_cells() {
        let summaries = vec![(0, vec![1u8, 2]), (2, vec![])];
        let sizes = [8u64, 0];
        let cells = [
            Cell {
                src: 0,
                dst: 2,
                bytes: 100,
                gets: true,
                mcast: false,
            },
            Cell {
                src: 1,
                dst: 0,
                bytes: 5,
                gets: false,
                mcast: true,
            },
        ];
        let m = reduce_msg(7, 1, &summaries, [(1u32, &sizes[..])].into_iter(), &cells);
        assert_eq!(head(&m), Some((REDUCE, 7)));
        let r = parse_reduce(&m, 3).unwrap();
        assert_eq!(r.round, 1);
        assert_eq!(r.summaries, vec![(0, &[1u8, 2][..]), (2, &[][..])]);
        assert_eq!(r.pushes, vec![(1, vec![8, 0])]);
        assert_eq!(r.cells, cells.to_vec());
        assert!(parse_reduce(&m, 2).is_none(), "pid 2 is not in a job of 2");
        assert!(parse_reduce(&m[..m.len() - 1], 3).is_none());
        let own = [Cell {
            src: 1,
            dst: 1,
            bytes: 1,
            gets: false,
            mcast: false,
        }];
        let m = reduce_msg(7, 0, &[], std::iter::empty(), &own);
        assert!(
            parse_reduce(&m, 3).is_none(),
            "a cell from a process to itself"
        );
    }

    #[test]
    fn record_heads_are_the_varints_and_read_back() {
        let vals = [
            0u64,
            1,
            127,
            128,
            300,
            16383,
            16384,
            (1 << 21) - 1,
            1 << 21,
            u64::MAX,
        ];
        for &a in &vals[..5] {
            for &b in &vals {
                for &c in &vals {
                    let mut fast = vec![9u8];
                    put_rec_head(&mut fast, REC_PUT, a, b, c);
                    let mut slow = vec![9u8, REC_PUT];
                    for v in [a, b, c] {
                        put_var(&mut slow, v);
                    }
                    assert_eq!(fast, slow, "{a} {b} {c}");
                    let mut r = Reader::at(&fast, 2);
                    assert_eq!([r.var(), r.var(), r.var()], [Some(a), Some(b), Some(c)]);
                    assert!(r.is_empty());
                }
            }
        }
    }

    fn as_rec((slot, offset, data): (u32, usize, std::ops::Range<usize>)) -> Rec {
        Rec::Put { slot, offset, data }
    }

    #[test]
    fn the_small_put_decoder_agrees_with_the_general_reader() {
        let mut checked = 0;
        for slot in [0u64, 5, 127, 128, 300] {
            for off in [0u64, 1, 127, 128, 16383, 16384, 1 << 30] {
                for len in [0usize, 1, 8, 127, 128] {
                    let mut m = vec![0u8; 3];
                    put_rec_head(&mut m, REC_PUT, slot, off, len as u64);
                    m.extend((0..len).map(|i| i as u8));
                    for tail in [0usize, 9] {
                        let mut m = m.clone();
                        m.extend(std::iter::repeat_n(0xee, tail));
                        let general = read_rec(&mut Reader::at(&m, 3));
                        match small_put(&m, 3) {
                            Some(small) => {
                                checked += 1;
                                assert!(slot < 128 && off < 16384 && len < 128);
                                assert_eq!(general, Some(as_rec(small)));
                            }
                            // Too short for the 8-byte load, or not small.
                            None => {
                                assert!(m.len() < 11 || slot >= 128 || off >= 16384 || len >= 128)
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 20);
        // Random bytes: whatever it decodes, the general reader decodes the same.
        let mut z = 0x1234_5678_9abc_def0u64;
        for _ in 0..20_000 {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            let n = (z % 24) as usize;
            let mut m: Vec<u8> = (0..n).map(|i| (z >> (i % 8 * 8)) as u8).collect();
            if let Some(b) = m.first_mut() {
                *b = REC_PUT;
            }
            if let Some(small) = small_put(&m, 0) {
                assert_eq!(read_rec(&mut Reader::at(&m, 0)), Some(as_rec(small)));
            }
        }
    }
}
