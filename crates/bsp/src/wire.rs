//! What the BSP layer puts in transport messages. Every message starts with its kind and
//! the superstep it belongs to, so that messages of the next superstep (a process may run
//! one barrier ahead) are told apart from those of the current one.
//!
//! - `REDUCE` (kind, step, round, rows): one round of the barrier's dissemination; carries
//!   every per-process [`Row`] the sender knows.
//! - `DATA` (kind, step, records): a chunk of the superstep's puts, get requests and BSMP
//!   sends for one destination, as records (see [`Rec`]).
//! - `REPLY` (kind, step, bytes): the values read for a DATA chunk's get requests,
//!   concatenated in request order.
//! - `DGET` (kind, step, slot, offset, len): a `bsp_direct_get` to be answered at once,
//!   whatever the server is doing; `DREPLY` (kind, step, status, server's
//!   [`Published`](bulkwire_engine::vm::Published), bytes) answers it.
//!
//! Integers are LEB128 varints. Decoding is total: malformed input gives `None`, never a
//! panic, and the caller turns it into an error naming the sender.

pub const REDUCE: u8 = 1;
pub const DATA: u8 = 2;
pub const REPLY: u8 = 3;
pub const DGET: u8 = 4;
pub const DREPLY: u8 = 5;

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

    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    pub fn var(&mut self) -> Option<u64> {
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
    pub fn size(&mut self) -> Option<usize> {
        usize::try_from(self.var()?).ok()
    }

    /// The range of the next `n` bytes, skipped.
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

/// Reads the next record of a chunk; `None` at the end, `Some(Err(()))` if malformed.
pub fn next_rec(r: &mut Reader<'_>) -> Option<Result<Rec, ()>> {
    if r.is_empty() {
        return None;
    }
    Some(read_rec(r).ok_or(()))
}

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

/// What one process contributes to a barrier: whom it sends to and how much, and the
/// collective calls of its superstep, so that every process can check them against the
/// others'. The OR of the processes' destination rows is the seed's reduction; carrying
/// the sizes folds the total exchange of counts and sizes into it (docs/bsp.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    /// The process is in `bsp_end`, not `bsp_sync`.
    pub ending: bool,
    /// `(destination, bytes of DATA, whether they hold get requests)`, destinations
    /// ascending, self excluded.
    pub sends: Vec<(u32, u64, bool)>,
    /// Registration calls of the superstep, in call order.
    pub ops: Vec<RegOp>,
    /// `bsp_set_tagsize` of the superstep, if called.
    pub tagsize: Option<u64>,
}

const F_ENDING: u8 = 1;
const F_OPS: u8 = 2;
const F_TAGSIZE: u8 = 4;

impl Row {
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
        put_var(buf, self.sends.len() as u64);
        for &(d, n, g) in &self.sends {
            put_var(buf, d as u64);
            put_var(buf, n << 1 | g as u64);
        }
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

    /// Decodes a row of a job of `p` processes.
    pub fn decode(b: &[u8], p: u32) -> Option<Row> {
        let mut r = Reader::new(b);
        let f = r.u8()?;
        let n = r.size()?;
        if n >= p as usize {
            return None;
        }
        let mut sends: Vec<(u32, u64, bool)> = Vec::with_capacity(n);
        for _ in 0..n {
            let d = u32::try_from(r.var()?).ok().filter(|&d| d < p)?;
            // Strictly ascending: a destination listed twice would be waited for twice.
            if sends.last().is_some_and(|l| l.0 >= d) {
                return None;
            }
            let v = r.var()?;
            sends.push((d, v >> 1, v & 1 == 1));
        }
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
        r.is_empty().then_some(Row {
            ending: f & F_ENDING != 0,
            sends,
            ops,
            tagsize,
        })
    }
}

/// Encodes a REDUCE message: header, round, then `(pid, row)` for every row known.
pub fn reduce_msg(step: u32, round: u8, rows: &[Option<Vec<u8>>]) -> Vec<u8> {
    let n = rows.iter().filter(|r| r.is_some()).count();
    let size: usize = rows.iter().flatten().map(|r| r.len() + 8).sum();
    let mut buf = Vec::with_capacity(HEAD + 4 + size);
    put_head(&mut buf, REDUCE, step);
    buf.push(round);
    put_var(&mut buf, n as u64);
    for (pid, r) in rows.iter().enumerate() {
        if let Some(r) = r {
            put_var(&mut buf, pid as u64);
            put_var(&mut buf, r.len() as u64);
            buf.extend_from_slice(r);
        }
    }
    buf
}

/// The rows a REDUCE message carries: `(pid, row bytes)`.
pub type Rows<'a> = Vec<(u32, &'a [u8])>;

/// Decodes a REDUCE message of a job of `p` processes: its round and rows.
pub fn parse_reduce(msg: &[u8], p: u32) -> Option<(u8, Rows<'_>)> {
    let mut r = Reader::at(msg, HEAD);
    let round = r.u8()?;
    let n = r.size()?;
    if n > p as usize {
        return None;
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let pid = u32::try_from(r.var()?).ok().filter(|&x| x < p)?;
        let len = r.size()?;
        v.push((pid, r.bytes(len)?));
    }
    r.is_empty().then_some((round, v))
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
    fn rows_round_trip_and_reject_nonsense() {
        let row = Row {
            ending: true,
            sends: vec![(1, 100, true), (3, 5, false)],
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
        row.encode(&mut b);
        assert_eq!(Row::decode(&b, 4), Some(row));
        assert_eq!(
            Row::decode(&b, 3),
            None,
            "destination 3 is not in a job of 3"
        );
        assert_eq!(Row::decode(&b[..b.len() - 1], 4), None);
        let twice = Row {
            sends: vec![(1, 1, false), (1, 2, false)],
            ..Row::default()
        };
        let mut t = Vec::new();
        twice.encode(&mut t);
        assert_eq!(Row::decode(&t, 4), None, "a destination listed twice");
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(Row::decode(&longer, 4), None);
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
            let _ = Row::decode(&bytes, 8);
            let _ = parse_reduce(&bytes, 8);
            let _ = head(&bytes);
            let mut r = Reader::new(&bytes);
            while let Some(Ok(_)) = next_rec(&mut r) {}
        }
    }

    #[test]
    fn reduce_messages_carry_known_rows() {
        let rows = vec![Some(vec![1, 2]), None, Some(vec![])];
        let m = reduce_msg(7, 1, &rows);
        assert_eq!(head(&m), Some((REDUCE, 7)));
        let (round, v) = parse_reduce(&m, 3).unwrap();
        assert_eq!(round, 1);
        assert_eq!(v, vec![(0, &[1u8, 2][..]), (2, &[][..])]);
    }
}
