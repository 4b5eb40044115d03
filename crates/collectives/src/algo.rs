//! The point-to-point algorithms (any placement of processes; over the network between
//! hosts). Each is a function of the call's arguments only, which every process has, so
//! all processes run the same algorithm. See `docs/collectives.md` for the selection.
//!
//! Ranks are often *relative* to the root (`vr = (rank - root) mod p`), which makes the
//! root the tree's rank 0. Binomial trees: relative rank `vr`'s parent is `vr` minus its
//! lowest set bit; its children are `vr + m` for the powers of two `m` below that bit (all
//! powers below p for the root), and child `vr + m`'s subtree is `[vr + m, vr + 2m)`.
//!
//! Reductions combine data of contiguous rank ranges and always put the lower range on
//! the left (`Op::apply(lo, hi)`), so non-commutative operations come out in rank order.

use std::ops::Range;

use crate::Error;
use crate::net::{Net, X, split2};
use crate::op::{Datatype, Op};

fn lowbit(x: u32) -> u32 {
    x & x.wrapping_neg()
}

/// The largest power of two not above `p` (`p >= 1`).
fn pof2_below(p: u32) -> u32 {
    1 << (31 - p.leading_zeros())
}

/// Size of the binomial subtree rooted at relative rank `vr` among `p`.
fn subtree(vr: u32, p: u32) -> u32 {
    let span = if vr == 0 { p } else { lowbit(vr) };
    span.min(p - vr)
}

/// Byte ranges of `len` split into `p` nearly equal pieces of whole `elem`-byte elements
/// (the first `len/elem mod p` pieces one element longer).
pub fn pieces(len: usize, elem: usize, p: u32) -> Vec<Range<usize>> {
    let n = len / elem;
    let (q, r) = (n / p as usize, n % p as usize);
    let mut at = 0;
    (0..p as usize)
        .map(|i| {
            let k = q + usize::from(i < r);
            let s = at;
            at += k * elem;
            s..at
        })
        .collect()
}

// ---- barrier ------------------------------------------------------------------------

/// Dissemination barrier (Hensgen, Finkel and Manber): in round k every process signals
/// `rank + 2^k` and waits for `rank - 2^k`; after ceil(log2 p) rounds everyone has heard,
/// directly or not, from everyone. The recursive-doubling pattern generalised to any p,
/// so it needs no fix-up rounds for p that are not powers of two.
pub fn barrier_dissemination(net: &Net) -> Result<(), Error> {
    let (me, p) = (net.me, net.p);
    let mut d = 1;
    let mut round = 0;
    while d < p {
        net.sendrecv((me + d) % p, &[], (me + p - d) % p, &mut [], round)?;
        d <<= 1;
        round += 1;
    }
    Ok(())
}

// ---- broadcast ----------------------------------------------------------------------

/// Binomial-tree broadcast: ceil(log2 p) steps, the whole message on every edge.
pub fn bcast_binomial(net: &Net, buf: &mut [u8], root: u32) -> Result<(), Error> {
    let (me, p) = (net.me, net.p);
    let vr = (me + p - root) % p;
    let abs = |v: u32| (v + root) % p;
    if vr != 0 {
        net.recv(abs(vr - lowbit(vr)), 0, buf)?;
    }
    let top = if vr == 0 {
        p.next_power_of_two()
    } else {
        lowbit(vr)
    };
    let data: &[u8] = buf;
    let mut ops = Vec::new();
    let mut m = top >> 1;
    while m > 0 {
        if vr + m < p {
            ops.push(X::Send {
                to: abs(vr + m),
                phase: 0,
                data,
            });
        }
        m >>= 1;
    }
    net.run(&mut ops)
}

/// Scatter + allgather broadcast (van de Geijn): the root scatters p pieces down a
/// binomial tree, then a ring allgather completes every process's copy. Each process
/// moves about 2 n bytes whatever p is, against n log2 p for the binomial tree.
pub fn bcast_scatter_allgather(net: &Net, buf: &mut [u8], root: u32) -> Result<(), Error> {
    let (me, p) = (net.me, net.p);
    let vr = (me + p - root) % p;
    let abs = |v: u32| (v + root) % p;
    let pc = pieces(buf.len(), 1, p);
    let span = |v: u32, n: u32| pc[v as usize].start..pc[(v + n - 1) as usize].end;
    // Scatter: relative rank vr gets pieces [vr, vr + subtree) from its parent, in place.
    if vr != 0 {
        let r = span(vr, subtree(vr, p));
        net.recv(abs(vr - lowbit(vr)), 0, &mut buf[r])?;
    }
    {
        let data: &[u8] = buf;
        let top = if vr == 0 {
            p.next_power_of_two()
        } else {
            lowbit(vr)
        };
        let mut ops = Vec::new();
        let mut m = top >> 1;
        while m > 0 {
            if vr + m < p {
                let c = vr + m;
                ops.push(X::Send {
                    to: abs(c),
                    phase: 0,
                    data: &data[span(c, subtree(c, p))],
                });
            }
            m >>= 1;
        }
        net.run(&mut ops)?;
    }
    ring_allgather(net, 1, buf, &pc, vr, &abs, 0)
}

// ---- ring ----------------------------------------------------------------------------

/// Ring allgather of `pieces` of `buf`: the process at ring position `pos` (its right
/// neighbour is `pos + 1`, `abs` maps positions to ranks) starts with piece
/// `pos + shift`, and in p-1 steps passes each piece on. Every step moves one piece per
/// link, so large messages use the whole bandwidth of every process.
pub fn ring_allgather(
    net: &Net,
    phase: u32,
    buf: &mut [u8],
    pieces: &[Range<usize>],
    pos: u32,
    abs: &dyn Fn(u32) -> u32,
    shift: u32,
) -> Result<(), Error> {
    let p = net.p;
    let (right, left) = (abs((pos + 1) % p), abs((pos + p - 1) % p));
    for s in 0..p - 1 {
        let out = pieces[((pos + shift + p - s) % p) as usize].clone();
        let inn = pieces[((pos + shift + 2 * p - s - 1) % p) as usize].clone();
        let (data, rbuf) = split2(buf, out, inn);
        net.sendrecv(right, data, left, rbuf, phase)?;
    }
    Ok(())
}

/// Ring reduce-scatter in place over `pieces` of `buf` (a commutative `op`): after p-1
/// steps the process at rank `me` holds the full reduction of piece `me + 1 mod p`.
fn ring_reduce_scatter(
    net: &Net,
    phase: u32,
    buf: &mut [u8],
    pieces: &[Range<usize>],
    dt: Datatype,
    op: &Op,
) -> Result<(), Error> {
    let (me, p) = (net.me, net.p);
    let (right, left) = ((me + 1) % p, (me + p - 1) % p);
    let most = pieces.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut tmp = vec![0u8; most];
    for s in 0..p - 1 {
        let out = pieces[((me + p - s) % p) as usize].clone();
        let inn = pieces[((me + 2 * p - s - 1) % p) as usize].clone();
        let t = &mut tmp[..inn.len()];
        net.sendrecv(right, &buf[out], left, t, phase)?;
        op.apply(dt, t, &mut buf[inn]);
    }
    Ok(())
}

// ---- scatter and gather ---------------------------------------------------------------

/// Binomial scatter of `block`-byte blocks: a process receives its subtree's blocks, in
/// relative rank order, keeps its own and passes the rest down. The root first rotates
/// its buffer into relative order when it is not rank 0.
pub fn scatter_binomial(net: &Net, send: &[u8], recv: &mut [u8], root: u32) -> Result<(), Error> {
    let (me, p) = (net.me, net.p);
    let b = recv.len();
    let vr = (me + p - root) % p;
    let abs = |v: u32| (v + root) % p;
    let cnt = subtree(vr, p) as usize;
    let rotated;
    let mut got;
    let data: &[u8] = if vr == 0 {
        if root == 0 {
            send
        } else {
            let r = root as usize * b;
            rotated = [&send[r..], &send[..r]].concat();
            &rotated
        }
    } else {
        got = vec![0u8; cnt * b];
        net.recv(abs(vr - lowbit(vr)), 0, &mut got)?;
        &got
    };
    let top = if vr == 0 {
        p.next_power_of_two()
    } else {
        lowbit(vr)
    };
    let mut ops = Vec::new();
    let mut m = top >> 1;
    while m > 0 {
        if vr + m < p {
            let c = vr + m;
            let n = subtree(c, p) as usize;
            ops.push(X::Send {
                to: abs(c),
                phase: 0,
                data: &data[m as usize * b..(m as usize + n) * b],
            });
        }
        m >>= 1;
    }
    net.run(&mut ops)?;
    recv.copy_from_slice(&data[..b]);
    Ok(())
}

/// Linear scatter: the root sends every block straight to its process (all at once).
pub fn scatter_linear(net: &Net, send: &[u8], recv: &mut [u8], root: u32) -> Result<(), Error> {
    let (me, p) = (net.me, net.p);
    let b = recv.len();
    if me != root {
        return net.recv(root, 0, recv);
    }
    let mut ops: Vec<X> = (1..p)
        .map(|k| {
            let j = (me + k) % p;
            X::Send {
                to: j,
                phase: 0,
                data: &send[j as usize * b..(j as usize + 1) * b],
            }
        })
        .collect();
    net.run(&mut ops)?;
    recv.copy_from_slice(&send[me as usize * b..(me as usize + 1) * b]);
    Ok(())
}

/// Binomial gather, the mirror of [`scatter_binomial`].
pub fn gather_binomial(net: &Net, send: &[u8], recv: &mut [u8], root: u32) -> Result<(), Error> {
    let (me, p) = (net.me, net.p);
    let b = send.len();
    let vr = (me + p - root) % p;
    let abs = |v: u32| (v + root) % p;
    let cnt = subtree(vr, p) as usize;
    // At the root with rank 0 the relative order is the absolute one: gather in place.
    let mut own;
    let tmp: &mut [u8] = if vr == 0 && root == 0 {
        &mut recv[..]
    } else {
        own = vec![0u8; cnt * b];
        &mut own
    };
    tmp[..b].copy_from_slice(send);
    {
        let mut ops = Vec::new();
        let mut rest = &mut tmp[b..];
        let mut m = 1u32;
        let top = if vr == 0 {
            p.next_power_of_two()
        } else {
            lowbit(vr)
        };
        while m < top && vr + m < p {
            let n = subtree(vr + m, p) as usize;
            let (now, later) = std::mem::take(&mut rest).split_at_mut(n * b);
            ops.push(X::Recv {
                from: abs(vr + m),
                phase: 0,
                buf: now,
            });
            rest = later;
            m <<= 1;
        }
        net.run(&mut ops)?;
    }
    if vr != 0 {
        return net.send(abs(vr - lowbit(vr)), 0, tmp);
    }
    if root != 0 {
        // Relative order back to absolute: relative v is rank (v + root) mod p.
        let r = root as usize * b;
        let t = tmp.to_vec();
        let tail = recv.len() - r;
        recv[r..].copy_from_slice(&t[..tail]);
        recv[..r].copy_from_slice(&t[tail..]);
    }
    Ok(())
}

/// Linear gather: the root receives every block straight into place.
pub fn gather_linear(net: &Net, send: &[u8], recv: &mut [u8], root: u32) -> Result<(), Error> {
    let (me, p) = (net.me, net.p);
    let b = send.len();
    if me != root {
        return net.send(root, 0, send);
    }
    let mut ops: Vec<X> = Vec::with_capacity(p as usize - 1);
    for (j, chunk) in recv.chunks_mut(b).enumerate().take(p as usize) {
        if j as u32 == me {
            chunk.copy_from_slice(send);
        } else {
            ops.push(X::Recv {
                from: j as u32,
                phase: 0,
                buf: chunk,
            });
        }
    }
    net.run(&mut ops)
}

// ---- allgather ----------------------------------------------------------------------

/// The processes taking part in recursive doubling when p is not a power of two: the
/// first `2 rem` ranks pair up (even into odd), the rest shift down. Returns this rank's
/// new rank, if it takes part, and the rank range a new rank stands for.
struct Fold {
    pof2: u32,
    rem: u32,
}

impl Fold {
    fn new(p: u32) -> Fold {
        let pof2 = pof2_below(p);
        Fold {
            pof2,
            rem: p - pof2,
        }
    }

    fn newrank(&self, r: u32) -> Option<u32> {
        if r < 2 * self.rem {
            (r % 2 == 1).then_some(r / 2)
        } else {
            Some(r - self.rem)
        }
    }

    /// The ranks new rank `k` stands for: `[lo, hi)`.
    fn ranks(&self, k: u32) -> Range<u32> {
        if k < self.rem {
            2 * k..2 * k + 2
        } else {
            k + self.rem..k + self.rem + 1
        }
    }

    /// The real rank of new rank `k` (the odd one of a pair).
    fn real(&self, k: u32) -> u32 {
        if k < self.rem {
            2 * k + 1
        } else {
            k + self.rem
        }
    }

    /// The ranks of the aligned group of `size` new ranks containing `k`.
    fn group(&self, k: u32, size: u32) -> Range<u32> {
        let g0 = k & !(size - 1);
        self.ranks(g0).start..self.ranks(g0 + size - 1).end
    }
}

/// Recursive-doubling allgather: in round k, partners `2^k` apart swap everything they
/// have (log2 p rounds). For p not a power of two, the first `2 rem` ranks fold in pairs
/// before (the even one hands its block to the odd one) and unfold after (the odd one
/// hands it the whole result): the standard fix-up, two extra rounds.
pub fn allgather_doubling(net: &Net, recv: &mut [u8], b: usize) -> Result<(), Error> {
    let (me, p) = (net.me, net.p);
    let f = Fold::new(p);
    let bytes = |r: Range<u32>| r.start as usize * b..r.end as usize * b;
    let Some(nr) = f.newrank(me) else {
        // Even member of a folded pair: hand over, then get the whole result back.
        net.send(me + 1, 0, &recv[bytes(me..me + 1)])?;
        return net.recv(me + 1, 2, recv);
    };
    if me < 2 * f.rem {
        net.recv(me - 1, 0, &mut recv[bytes(me - 1..me)])?;
    }
    let mut mask = 1;
    while mask < f.pof2 {
        let pk = nr ^ mask;
        let (mine, theirs) = (f.group(nr, mask), f.group(pk, mask));
        let (data, rbuf) = split2(recv, bytes(mine), bytes(theirs));
        net.sendrecv(f.real(pk), data, f.real(pk), rbuf, 1)?;
        mask <<= 1;
    }
    if me < 2 * f.rem {
        net.send(me - 1, 2, recv)?;
    }
    Ok(())
}

// ---- alltoall -----------------------------------------------------------------------

/// One block of an alltoall(v): what this process sends to / receives from a peer.
pub struct Blocks<'b> {
    pub send: Vec<&'b [u8]>,
    pub recv: Vec<&'b mut [u8]>,
}

/// All exchanges posted at once, destinations in latin-square order (process i sends to
/// i+1, i+2, ... so at any moment every destination has one sender, the BSPlib paper): best for
/// small blocks, where the time is latency. Empty blocks are not sent.
pub fn alltoall_posted(net: &Net, mut bl: Blocks<'_>) -> Result<(), Error> {
    let (me, p) = (net.me, net.p);
    let own = bl.send[me as usize];
    bl.recv[me as usize].copy_from_slice(own);
    let mut recvs: Vec<Option<&mut [u8]>> = bl.recv.into_iter().map(Some).collect();
    let mut ops = Vec::with_capacity(2 * p as usize);
    for k in 1..p {
        let from = (me + p - k) % p;
        if let Some(buf) = recvs[from as usize].take()
            && !buf.is_empty()
        {
            ops.push(X::Recv {
                from,
                phase: 0,
                buf,
            });
        }
    }
    for k in 1..p {
        let to = (me + k) % p;
        let data = bl.send[to as usize];
        if !data.is_empty() {
            ops.push(X::Send { to, phase: 0, data });
        }
    }
    net.run(&mut ops)
}

/// Pairwise exchange: in step k, process i sends to i+k and receives from i-k (a latin
/// square: one sender per destination per step), one step at a time. Large blocks: the
/// bandwidth goes to one pair at a time instead of p-1 competing flows.
pub fn alltoall_pairwise(net: &Net, bl: Blocks<'_>) -> Result<(), Error> {
    let (me, p) = (net.me, net.p);
    let mut recvs: Vec<Option<&mut [u8]>> = bl.recv.into_iter().map(Some).collect();
    if let Some(own) = recvs[me as usize].take() {
        own.copy_from_slice(bl.send[me as usize]);
    }
    for k in 1..p {
        let (to, from) = ((me + k) % p, (me + p - k) % p);
        let mut ops = Vec::with_capacity(2);
        if let Some(buf) = recvs[from as usize].take()
            && !buf.is_empty()
        {
            ops.push(X::Recv {
                from,
                phase: 0,
                buf,
            });
        }
        let data = bl.send[to as usize];
        if !data.is_empty() {
            ops.push(X::Send { to, phase: 0, data });
        }
        net.run(&mut ops)?;
    }
    Ok(())
}

// ---- reductions ---------------------------------------------------------------------

/// Binomial-tree reduce to relative rank 0: a process combines its children's subtrees
/// (higher ranks, on the right) into its own, then sends to its parent. For a
/// non-commutative `op` the caller passes `root` = 0 so that relative order is rank order.
/// Returns the result at the tree's root (`None` elsewhere).
pub fn reduce_binomial(
    net: &Net,
    send: &[u8],
    root: u32,
    dt: Datatype,
    op: &Op,
) -> Result<Option<Vec<u8>>, Error> {
    let (me, p) = (net.me, net.p);
    let vr = (me + p - root) % p;
    let abs = |v: u32| (v + root) % p;
    let mut acc = send.to_vec();
    let mut tmp = vec![0u8; send.len()];
    let mut mask = 1;
    while mask < p {
        if vr & mask != 0 {
            net.send(abs(vr - mask), 0, &acc)?;
            return Ok(None);
        }
        if vr + mask < p {
            net.recv(abs(vr + mask), 0, &mut tmp)?;
            // acc covers [vr, vr + mask), tmp the next ranks: acc op tmp.
            op.apply(dt, &acc, &mut tmp);
            std::mem::swap(&mut acc, &mut tmp);
        }
        mask <<= 1;
    }
    Ok(Some(acc))
}

/// Reduce-scatter (ring) then gather to the root (Rabenseifner's scheme with a ring):
/// every process moves about 2 n bytes instead of n log2 p. Commutative `op` only.
pub fn reduce_ring(
    net: &Net,
    send: &[u8],
    recv: &mut [u8],
    root: u32,
    dt: Datatype,
    op: &Op,
) -> Result<(), Error> {
    let (me, p) = (net.me, net.p);
    let pc = pieces(send.len(), dt.size(), p);
    let mut acc = send.to_vec();
    ring_reduce_scatter(net, 0, &mut acc, &pc, dt, op)?;
    let mine = pc[((me + 1) % p) as usize].clone();
    if me != root {
        return net.send(root, 1, &acc[mine]);
    }
    recv[mine.clone()].copy_from_slice(&acc[mine]);
    let mut ops = Vec::new();
    let mut rest = &mut recv[..];
    let mut at = 0;
    // Pieces in order of offset; rank r holds piece r + 1.
    for (i, r) in pc.iter().enumerate() {
        let (skip, tail) = std::mem::take(&mut rest).split_at_mut(r.start - at);
        let _ = skip;
        let (now, later) = tail.split_at_mut(r.len());
        rest = later;
        at = r.end;
        let owner = (i as u32 + p - 1) % p;
        if owner != me && !now.is_empty() {
            ops.push(X::Recv {
                from: owner,
                phase: 1,
                buf: now,
            });
        }
    }
    net.run(&mut ops)
}

/// Recursive-doubling allreduce in place (with the fold for p not a power of two): log2
/// p rounds of the whole vector. Keeps rank order, so any associative `op` works.
pub fn allreduce_doubling(net: &Net, buf: &mut [u8], dt: Datatype, op: &Op) -> Result<(), Error> {
    let me = net.me;
    let f = Fold::new(net.p);
    let mut tmp = vec![0u8; buf.len()];
    let Some(nr) = f.newrank(me) else {
        net.send(me + 1, 0, buf)?;
        return net.recv(me + 1, 2, buf);
    };
    if me < 2 * f.rem {
        net.recv(me - 1, 0, &mut tmp)?;
        op.combine(dt, buf, &mut tmp, true);
    }
    let mut mask = 1;
    while mask < f.pof2 {
        let partner = f.real(nr ^ mask);
        net.sendrecv(partner, buf, partner, &mut tmp, 1)?;
        op.combine(dt, buf, &mut tmp, partner < me);
        mask <<= 1;
    }
    if me < 2 * f.rem {
        net.send(me - 1, 2, buf)?;
    }
    Ok(())
}

/// Ring allreduce in place: reduce-scatter then allgather around the ring, 2(p-1) steps
/// of n/p bytes. Commutative `op` only.
pub fn allreduce_ring(net: &Net, buf: &mut [u8], dt: Datatype, op: &Op) -> Result<(), Error> {
    let p = net.p;
    let pc = pieces(buf.len(), dt.size(), p);
    ring_reduce_scatter(net, 0, buf, &pc, dt, op)?;
    ring_allgather(net, 1, buf, &pc, net.me, &|v| v, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_whole_elements() {
        let pc = pieces(40, 4, 3);
        assert_eq!(pc, vec![0..16, 16..28, 28..40]);
        let pc = pieces(8, 8, 4);
        assert_eq!(pc, vec![0..8, 8..8, 8..8, 8..8]);
        assert_eq!(pieces(0, 1, 2), vec![0..0, 0..0]);
    }

    #[test]
    fn binomial_subtrees_partition_the_ranks() {
        for p in 1..40u32 {
            // Every relative rank but 0 has one parent whose subtree contains its own.
            let mut covered = vec![0u32; p as usize];
            for vr in 0..p {
                let n = subtree(vr, p);
                for v in vr..vr + n {
                    covered[v as usize] += 1;
                }
            }
            // Rank v is in the subtrees of itself and all its ancestors: popcount + 1
            // (rank 0 only in its own).
            for v in 0..p {
                let depth = if v == 0 { 1 } else { v.count_ones() + 1 };
                assert_eq!(covered[v as usize], depth, "p={p} v={v}");
            }
        }
    }

    #[test]
    fn fold_groups_are_contiguous() {
        for p in 1..40u32 {
            let f = Fold::new(p);
            let mut all: Vec<u32> = Vec::new();
            for k in 0..f.pof2 {
                all.extend(f.ranks(k));
                assert_eq!(f.newrank(f.real(k)), Some(k));
            }
            assert_eq!(all, (0..p).collect::<Vec<_>>(), "p={p}");
            let mut size = 1;
            while size <= f.pof2 {
                for k in 0..f.pof2 {
                    let g = f.group(k, size);
                    assert!(g.contains(&f.real(k)));
                }
                size <<= 1;
            }
        }
    }
}
