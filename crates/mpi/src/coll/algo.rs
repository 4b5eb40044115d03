//! The algorithms of the collectives, as schedule builders over packed bytes.
//!
//! Choices follow MPICH and Open MPI and the collectives layer (`bulkwire_collectives`,
//! whose [`Thresholds`] give the switch points, so both layers change algorithm at the same
//! sizes):
//! - barrier: dissemination, ceil(log2 p) rounds of empty messages, any p;
//! - bcast: binomial tree (log2 p steps, latency-bound sizes); from `bcast_long` with 3 or
//!   more processes, binomial scatter + ring allgather (each process moves about 2n bytes
//!   instead of n per tree level);
//! - gather and scatter: binomial trees (log2 p steps, subtrees' blocks forwarded
//!   together) while the root's buffer is below `gather_long`, linear beyond (forwarding
//!   large blocks costs more than the root's p - 1 messages); the v-variants linear;
//! - allgather(v): recursive doubling for a power-of-two p below `allgather_long` (log2 p
//!   steps), ring otherwise (p - 1 steps, each process sends each block once);
//! - alltoall(v/w): everything posted at once for small blocks, pairwise exchange (one
//!   partner per step, so no process is flooded) from `alltoall_long`;
//! - reduce: binomial tree; from `reduce_long` (commutative, at least p elements) ring
//!   reduce-scatter and the blocks sent to the root; allreduce: recursive doubling (with the fold of the extra
//!   processes when p is not a power of two) below `allreduce_long`, ring reduce-scatter
//!   and ring allgather beyond (Rabenseifner's bandwidth-optimal volume, 2n(p-1)/p per
//!   process) for commutative operations with at least p elements;
//! - reduce_scatter: ring for commutative operations, else a rank-ordered reduce to rank
//!   0 and a scatter;
//! - scan and exscan: recursive doubling (log2 p steps).
//!
//! Operations that are not commutative are applied in rank order everywhere: each
//! reduction step knows whether its incoming data comes from lower or higher ranks.

// The builders take the communicator's shape, the buffers and the thresholds as plain
// arguments: a struct of them would only be unpacked again.
#![allow(clippy::too_many_arguments)]

use bulkwire_collectives::Thresholds;

use super::sched::{Sched, Slice};

fn rel(me: u32, root: u32, p: u32) -> u32 {
    (me + p - root) % p
}

fn abs(r: u32, root: u32, p: u32) -> u32 {
    (r + root) % p
}

/// Subtree size of relative rank `r` in a binomial tree of `p` (the root's is p).
fn subtree(r: u32, p: u32) -> u32 {
    if r == 0 {
        p
    } else {
        (r & r.wrapping_neg()).min(p - r)
    }
}

pub fn barrier(s: &mut Sched, me: u32, p: u32) {
    let z = s.tmp(0);
    let mut d = 1;
    while d < p {
        s.recv((me + p - d) % p, z);
        s.send((me + d) % p, z);
        s.end_round();
        d <<= 1;
    }
}

/// Broadcast of `buf` (the root's holds the data).
pub fn bcast(s: &mut Sched, me: u32, p: u32, root: u32, buf: Slice, t: &Thresholds) {
    if p == 1 {
        return;
    }
    let r = rel(me, root, p);
    if buf.len < t.bcast_long || p < 3 {
        // Binomial: receive from the parent, then send to the children.
        let mut mask = 1;
        while mask < p {
            if r & mask != 0 {
                s.recv(abs(r - mask, root, p), buf);
                s.end_round();
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            if r + mask < p {
                s.send(abs(r + mask, root, p), buf);
            }
            mask >>= 1;
        }
        s.end_round();
        return;
    }
    // Scatter of p chunks along the binomial tree, then a ring allgather of the chunks.
    let chunk = buf.len.div_ceil(p as usize);
    let piece = |from: u32, n: u32| {
        let a = (from as usize * chunk).min(buf.len);
        let b = ((from + n) as usize * chunk).min(buf.len);
        buf.sub(a, b - a)
    };
    let mut mask = 1;
    while mask < p {
        if r & mask != 0 {
            s.recv(abs(r - mask, root, p), piece(r, subtree(r, p)));
            s.end_round();
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if r + mask < p {
            let c = r + mask;
            s.send(abs(c, root, p), piece(c, subtree(c, p)));
        }
        mask >>= 1;
    }
    s.end_round();
    let (right, left) = (abs((r + 1) % p, root, p), abs((r + p - 1) % p, root, p));
    for k in 0..p - 1 {
        s.send(right, piece((r + p - k) % p, 1));
        s.recv(left, piece((r + 2 * p - k - 1) % p, 1));
        s.end_round();
    }
}

/// Gather of equal blocks of `n` bytes: `input` everywhere (at the root, `None` for
/// `MPI_IN_PLACE`: its block is already in place), `out[i]` at the root.
pub fn gather(
    s: &mut Sched,
    me: u32,
    p: u32,
    root: u32,
    input: Option<Slice>,
    out: &[Slice],
    n: usize,
    t: &Thresholds,
) {
    if n * p as usize >= t.gather_long || p == 1 {
        return gatherv(s, me, root, input, out, p);
    }
    let r = rel(me, root, p);
    let sub = subtree(r, p);
    let tmp = s.tmp(sub as usize * n);
    if let Some(i) = input {
        s.copy(i, tmp.sub(0, n));
    } else if me == root {
        s.copy(out[me as usize], tmp.sub(0, n));
    }
    s.end_round();
    // Every child's subtree at once, then the whole subtree to the parent.
    let mut mask = 1;
    while mask < p && r & mask == 0 {
        if r + mask < p {
            let c = r + mask;
            let k = subtree(c, p) as usize;
            s.recv(abs(c, root, p), tmp.sub(mask as usize * n, k * n));
        }
        mask <<= 1;
    }
    s.end_round();
    if r != 0 {
        s.send(abs(r - (r & r.wrapping_neg()), root, p), tmp);
        s.end_round();
    } else {
        for j in 0..p {
            s.copy(tmp.sub(j as usize * n, n), out[abs(j, root, p) as usize]);
        }
        s.end_round();
    }
}

/// Linear gather: the root receives every block straight into place.
pub fn gatherv(s: &mut Sched, me: u32, root: u32, input: Option<Slice>, out: &[Slice], p: u32) {
    if me == root {
        for i in 0..p {
            if i != me {
                s.recv(i, out[i as usize]);
            }
        }
        if let Some(i) = input {
            s.copy(i, out[me as usize]);
        }
    } else if let Some(i) = input {
        s.send(root, i);
    }
    s.end_round();
}

/// Scatter of equal blocks of `n` bytes: `input[i]` at the root, `out` everywhere (at the
/// root, `None` for `MPI_IN_PLACE`).
pub fn scatter(
    s: &mut Sched,
    me: u32,
    p: u32,
    root: u32,
    input: &[Slice],
    out: Option<Slice>,
    n: usize,
    t: &Thresholds,
) {
    if n * p as usize >= t.gather_long || p == 1 {
        return scatterv(s, me, root, input, out, p);
    }
    let r = rel(me, root, p);
    let sub = subtree(r, p);
    let tmp = s.tmp(sub as usize * n);
    if r == 0 {
        for j in 0..p {
            s.copy(input[abs(j, root, p) as usize], tmp.sub(j as usize * n, n));
        }
        s.end_round();
    } else {
        s.recv(abs(r - (r & r.wrapping_neg()), root, p), tmp);
        s.end_round();
    }
    let mut mask = 1;
    while mask < p && r & mask == 0 {
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if r + mask < p {
            let c = r + mask;
            let k = subtree(c, p) as usize;
            s.send(abs(c, root, p), tmp.sub(mask as usize * n, k * n));
        }
        mask >>= 1;
    }
    if let Some(o) = out {
        s.copy(tmp.sub(0, n), o);
    }
    s.end_round();
}

/// Linear scatter.
pub fn scatterv(s: &mut Sched, me: u32, root: u32, input: &[Slice], out: Option<Slice>, p: u32) {
    if me == root {
        for i in 0..p {
            if i != me {
                s.send(i, input[i as usize]);
            }
        }
        if let Some(o) = out {
            s.copy(input[me as usize], o);
        }
    } else if let Some(o) = out {
        s.recv(root, o);
    }
    s.end_round();
}

/// Allgather: `blocks[i]` receives rank i's block; `input` is this rank's (`None`: already
/// in `blocks[me]`).
pub fn allgather(
    s: &mut Sched,
    me: u32,
    p: u32,
    input: Option<Slice>,
    blocks: &[Slice],
    t: &Thresholds,
) {
    if let Some(i) = input {
        s.copy(i, blocks[me as usize]);
        s.end_round();
    }
    if p == 1 {
        return;
    }
    let total: usize = blocks.iter().map(|b| b.len).sum();
    if p.is_power_of_two() && total < t.allgather_long {
        // Recursive doubling: at distance `mask`, trade the `mask` blocks gathered so far.
        let mut mask = 1;
        while mask < p {
            let partner = me ^ mask;
            let (mine, theirs) = (me & !(mask - 1), partner & !(mask - 1));
            for k in 0..mask {
                s.recv(partner, blocks[(theirs + k) as usize]);
            }
            for k in 0..mask {
                s.send(partner, blocks[(mine + k) as usize]);
            }
            s.end_round();
            mask <<= 1;
        }
        return;
    }
    let (right, left) = ((me + 1) % p, (me + p - 1) % p);
    for k in 0..p - 1 {
        s.send(right, blocks[((me + p - k) % p) as usize]);
        s.recv(left, blocks[((me + 2 * p - k - 1) % p) as usize]);
        s.end_round();
    }
}

/// Alltoall: `input[i]` goes to rank i, `out[i]` comes from rank i.
pub fn alltoall(s: &mut Sched, me: u32, p: u32, input: &[Slice], out: &[Slice], t: &Thresholds) {
    s.copy(input[me as usize], out[me as usize]);
    s.end_round();
    let largest = input.iter().chain(out).map(|b| b.len).max().unwrap_or(0);
    let posted = largest < t.alltoall_long;
    for k in 1..p {
        let (to, from) = ((me + k) % p, (me + p - k) % p);
        s.recv(from, out[from as usize]);
        s.send(to, input[to as usize]);
        if !posted {
            s.end_round();
        }
    }
    s.end_round();
}

/// Reduce of `input` (`count` packed elements of the schedule's reduction) into `out` at
/// the root. `input` is `None` at an `MPI_IN_PLACE` root (the input is in `out`).
/// `commutative`: the operation may combine in any order.
pub fn reduce(
    s: &mut Sched,
    me: u32,
    p: u32,
    root: u32,
    input: Option<Slice>,
    out: Option<Slice>,
    esize: usize,
    commutative: bool,
    t: &Thresholds,
) {
    let count = len_of(input, out) / esize.max(1);
    if commutative && len_of(input, out) >= t.reduce_long && count >= p as usize && p > 1 {
        // Rabenseifner: ring reduce-scatter of p blocks, then each block to the root; every
        // process sends about 2n(p-1)/p bytes where the tree's inner nodes send n log2 p.
        let input = if me == root { input.or(out) } else { input };
        let acc = s.tmp(len_of(input, out));
        if let Some(i) = input {
            s.copy(i, acc);
        }
        s.end_round();
        let blocks = even_blocks(acc, count, esize, p);
        reduce_scatter_ring(s, me, p, &blocks, 0);
        match out {
            Some(o) if me == root => {
                let mine = even_blocks(o, count, esize, p);
                for i in 0..p {
                    if i != me {
                        s.recv(i, mine[i as usize]);
                    }
                }
                s.copy(blocks[me as usize], mine[me as usize]);
            }
            _ => s.send(root, blocks[me as usize]),
        }
        s.end_round();
        return;
    }
    // A tree rooted at rank 0 combines in rank order; a commutative one may start anywhere.
    let top = if commutative { root } else { 0 };
    let r = rel(me, top, p);
    // An in-place root's input is in its output.
    let input = if me == root { input.or(out) } else { input };
    let len = input.or(out).map_or(0, |x| x.len);
    // The accumulator: the root's output itself, else scratch.
    let acc = match out {
        Some(o) if me == top => o,
        _ => s.tmp(len),
    };
    if let Some(i) = input {
        s.copy(i, acc);
    }
    s.end_round();
    let mut mask = 1;
    let mut kids = Vec::new();
    while mask < p && r & mask == 0 {
        if r + mask < p {
            let t = s.tmp(len);
            s.recv(abs(r + mask, top, p), t);
            kids.push(t);
        }
        mask <<= 1;
    }
    // Children by increasing distance: each holds the ranks just above the accumulator's.
    for t in kids {
        s.reduce(t, acc, false);
    }
    s.end_round();
    if r != 0 {
        s.send(abs(r - (r & r.wrapping_neg()), top, p), acc);
        s.end_round();
    }
    if top != root {
        if me == top {
            s.send(root, acc);
        } else if me == root
            && let Some(o) = out
        {
            s.recv(top, o);
        }
        s.end_round();
    }
}

fn len_of(a: Option<Slice>, b: Option<Slice>) -> usize {
    a.or(b).map_or(0, |x| x.len)
}

/// Allreduce in place in `buf` (`count` packed elements of size `esize`).
pub fn allreduce(
    s: &mut Sched,
    me: u32,
    p: u32,
    buf: Slice,
    esize: usize,
    commutative: bool,
    t: &Thresholds,
) {
    if p == 1 || buf.len == 0 {
        return;
    }
    let count = buf.len / esize;
    if commutative && buf.len >= t.allreduce_long && count >= p as usize {
        let blocks = even_blocks(buf, count, esize, p);
        reduce_scatter_ring(s, me, p, &blocks, 1);
        let (right, left) = ((me + 1) % p, (me + p - 1) % p);
        for k in 0..p - 1 {
            s.send(right, blocks[((me + 1 + p - k) % p) as usize]);
            s.recv(left, blocks[((me + p - k) % p) as usize]);
            s.end_round();
        }
        return;
    }
    let tmp = s.tmp(buf.len);
    let pof2 = 1u32 << (31 - p.leading_zeros());
    let rem = p - pof2;
    // The first 2*rem ranks pair up: the even one hands its vector to the odd one and
    // waits; pairs are neighbours, so rank order survives.
    let newrank = if me < 2 * rem {
        if me.is_multiple_of(2) {
            s.send(me + 1, buf);
            s.end_round();
            None
        } else {
            s.recv(me - 1, tmp);
            s.reduce(tmp, buf, true);
            s.end_round();
            Some(me / 2)
        }
    } else {
        Some(me - rem)
    };
    if let Some(nr) = newrank {
        let mut mask = 1;
        while mask < pof2 {
            let nd = nr ^ mask;
            let dst = if nd < rem { nd * 2 + 1 } else { nd + rem };
            s.recv(dst, tmp);
            s.send(dst, buf);
            s.reduce(tmp, buf, dst < me);
            s.end_round();
            mask <<= 1;
        }
    }
    if me < 2 * rem {
        if me.is_multiple_of(2) {
            s.recv(me + 1, buf);
        } else {
            s.send(me - 1, buf);
        }
        s.end_round();
    }
}

/// `count` elements of `esize` bytes in `buf`, cut into p blocks differing by at most one
/// element.
pub fn even_blocks(buf: Slice, count: usize, esize: usize, p: u32) -> Vec<Slice> {
    let (base, extra) = (count / p as usize, count % p as usize);
    let mut at = 0;
    (0..p as usize)
        .map(|i| {
            let n = (base + usize::from(i < extra)) * esize;
            let b = buf.sub(at, n);
            at += n;
            b
        })
        .collect()
}

/// Ring reduce-scatter in place over `blocks` (commutative operations): afterwards rank r
/// holds the reduction of block (r + shift) mod p.
pub fn reduce_scatter_ring(s: &mut Sched, me: u32, p: u32, blocks: &[Slice], shift: u32) {
    let largest = blocks.iter().map(|b| b.len).max().unwrap_or(0);
    let tmp = s.tmp(largest);
    let (right, left) = ((me + 1) % p, (me + p - 1) % p);
    for k in 0..p - 1 {
        let sb = blocks[((me + shift + 2 * p - k - 1) % p) as usize];
        let rb = blocks[((me + shift + 2 * p - k - 2) % p) as usize];
        s.send(right, sb);
        s.recv(left, tmp.sub(0, rb.len));
        s.reduce(tmp.sub(0, rb.len), rb, true);
        s.end_round();
    }
}

/// Reduce-scatter: `input` holds every block (`counts[i]` elements for rank i), `out`
/// receives this rank's reduced block.
pub fn reduce_scatter(
    s: &mut Sched,
    me: u32,
    p: u32,
    input: Slice,
    out: Slice,
    counts: &[usize],
    esize: usize,
    commutative: bool,
    t: &Thresholds,
) {
    let mut at = 0;
    if commutative {
        // A copy to reduce into (the input is the user's, read-only).
        let acc = s.tmp(input.len);
        s.copy(input, acc);
        s.end_round();
        let blocks: Vec<Slice> = counts
            .iter()
            .map(|&c| {
                let b = acc.sub(at, c * esize);
                at += c * esize;
                b
            })
            .collect();
        if p > 1 {
            reduce_scatter_ring(s, me, p, &blocks, 0);
        }
        s.copy(blocks[me as usize], out);
        s.end_round();
        return;
    }
    let whole = if me == 0 {
        Some(s.tmp(input.len))
    } else {
        None
    };
    reduce(s, me, p, 0, Some(input), whole, esize, false, t);
    let blocks: Vec<Slice> = match whole {
        Some(w) => counts
            .iter()
            .map(|&c| {
                let b = w.sub(at, c * esize);
                at += c * esize;
                b
            })
            .collect(),
        None => Vec::new(),
    };
    let n = counts[0] * esize;
    if counts.iter().all(|&c| c * esize == n) {
        scatter(s, me, p, 0, &blocks, Some(out), n, t);
    } else {
        scatterv(s, me, 0, &blocks, Some(out), p);
    }
}

/// Inclusive (`exclusive == false`) or exclusive prefix reduction of `input` into `out`.
pub fn scan(s: &mut Sched, me: u32, p: u32, input: Slice, out: Slice, exclusive: bool) {
    let len = input.len;
    // `partial`: the reduction over the block of ranks gathered so far, this one included.
    let partial = s.tmp(len);
    s.copy(input, partial);
    if !exclusive {
        s.copy(input, out);
    }
    s.end_round();
    let tmp = s.tmp(len);
    let mut have = !exclusive;
    let mut mask = 1;
    while mask < p {
        let dst = me ^ mask;
        if dst < p {
            s.recv(dst, tmp);
            s.send(dst, partial);
            if dst < me {
                s.reduce(tmp, partial, true);
                if have {
                    s.reduce(tmp, out, true);
                } else {
                    s.copy(tmp, out);
                    have = true;
                }
            } else {
                s.reduce(tmp, partial, false);
            }
            s.end_round();
        }
        mask <<= 1;
    }
}

/// A neighborhood exchange in one round: receives and sends in the given orders (the
/// caller orders them so that messages between the same pair of processes match their
/// intended blocks: the transport keeps each pair's messages in order).
pub fn neighbor(s: &mut Sched, recvs: &[(u32, Slice)], sends: &[(u32, Slice)]) {
    for &(from, b) in recvs {
        s.recv(from, b);
    }
    for &(to, b) in sends {
        s.send(to, b);
    }
    s.end_round();
}
