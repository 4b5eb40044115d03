//! From an MPI call's arguments to a schedule: the user's buffers become packed regions
//! (in place for contiguous types, staged otherwise), `MPI_IN_PLACE` is resolved, the
//! reduction is checked against the type, and an algorithm (`algo`) fills the rounds.
//!
//! Arguments are the C call's, already checked for what a planner cannot know (handles,
//! counts, roots); pointers follow the C call's contract.

use std::os::raw::c_int;
use std::sync::Arc;

use bulkwire_collectives::Thresholds;

use super::algo;
use super::sched::{Reduction, Sched, Slice};
use crate::datatype::Datatype;
use crate::error::MPI_ERR_OP;
use crate::handle::Raw;
use crate::op::{self, Op};

/// `MPI_IN_PLACE`'s value.
#[allow(clippy::manual_dangling_ptr)] // the ABI's value, not a dangling pointer
pub const IN_PLACE: *const u8 = 1 as *const u8;

/// A communicator as a planner sees it.
#[derive(Clone, Debug)]
pub struct Env {
    pub me: u32,
    pub p: u32,
    pub tag: u16,
    pub t: Thresholds,
}

/// A buffer argument: pointer, element count, type.
#[derive(Clone)]
pub struct Arg {
    pub ptr: *mut u8,
    pub count: usize,
    pub dt: Arc<Datatype>,
}

impl Arg {
    pub fn new(ptr: *const u8, count: usize, dt: &Arc<Datatype>) -> Arg {
        Arg {
            ptr: ptr as *mut u8,
            count,
            dt: dt.clone(),
        }
    }

    pub fn in_place(&self) -> bool {
        std::ptr::eq(self.ptr, IN_PLACE)
    }

    /// `count` elements from element `displ` (in extents) on.
    fn at(&self, displ: isize, count: usize) -> Arg {
        Arg {
            ptr: self.ptr.wrapping_offset(displ * self.dt.extent()),
            count,
            dt: self.dt.clone(),
        }
    }

    fn bytes(&self) -> usize {
        self.count * self.dt.size()
    }
}

/// # Safety
/// `a` must describe memory valid until the schedule completes.
unsafe fn region(s: &mut Sched, a: &Arg, input: bool, output: bool) -> Slice {
    // SAFETY: forwarded contract.
    unsafe { s.region(a.ptr, a.count, &a.dt, input, output) }
}

/// A packed snapshot of `a` (for in-place variants whose input is overwritten).
///
/// # Safety
/// `a` must describe valid memory.
unsafe fn snapshot(s: &mut Sched, a: &Arg) -> Slice {
    let mut v = Vec::with_capacity(a.bytes());
    // SAFETY: forwarded contract.
    unsafe { a.dt.pack(a.ptr, a.count, &mut v) };
    s.own(v)
}

/// Checks that `op` is defined on `dt`, and makes the schedule's reduction.
pub fn reduction(op: &Arc<Op>, dt: &Arc<Datatype>, dth: Raw) -> Result<Reduction, c_int> {
    reduction_ok(op, dt)?;
    Ok(Reduction {
        op: op.clone(),
        dt: dt.clone(),
        dth,
    })
}

/// Whether `op` is defined on `dt`: `MPI_ERR_OP` if not.
pub fn reduction_ok(op: &Op, dt: &Datatype) -> Result<(), c_int> {
    if let Some(p) = op.predefined() {
        match dt.basic() {
            Some((b, _)) => op::check(p, b)?,
            None if matches!(p, op::Predef::Replace | op::Predef::NoOp) => {}
            None => return Err(MPI_ERR_OP),
        }
    }
    Ok(())
}

pub fn barrier(e: &Env) -> Sched {
    let mut s = Sched::new(e.tag);
    algo::barrier(&mut s, e.me, e.p);
    s
}

/// # Safety
/// The buffers must stay valid, and untouched by the program, until the schedule completes.
pub unsafe fn bcast(e: &Env, buf: &Arg, root: u32) -> Sched {
    let mut s = Sched::new(e.tag);
    // SAFETY: forwarded contract.
    let b = unsafe { region(&mut s, buf, e.me == root, e.me != root) };
    algo::bcast(&mut s, e.me, e.p, root, b, &e.t);
    s
}

/// Gather (`counts == None`: every block `recv.count` elements, at consecutive places)
/// or gatherv (`counts`, `displs` in extents).
///
/// # Safety
/// As [`bcast`].
pub unsafe fn gather(
    e: &Env,
    send: &Arg,
    recv: &Arg,
    vcounts: Option<(&[usize], &[isize])>,
    root: u32,
) -> Sched {
    let mut s = Sched::new(e.tag);
    let me = e.me;
    let inplace = me == root && send.in_place();
    // SAFETY: forwarded contract (below as well).
    let input = (!inplace).then(|| unsafe { region(&mut s, send, true, false) });
    let blocks: Vec<Slice> = if me == root {
        (0..e.p as usize)
            .map(|i| {
                let a = match vcounts {
                    Some((c, d)) => recv.at(d[i], c[i]),
                    None => recv.at((i * recv.count) as isize, recv.count),
                };
                let own = i == me as usize && inplace;
                // SAFETY: the caller's contract covers every buffer of the call.
                unsafe { region(&mut s, &a, own, !own) }
            })
            .collect()
    } else {
        Vec::new()
    };
    match vcounts {
        None => {
            let n = if me == root {
                recv.bytes()
            } else {
                send.bytes()
            };
            algo::gather(&mut s, me, e.p, root, input, &blocks, n, &e.t);
        }
        Some(_) => algo::gatherv(&mut s, me, root, input, &blocks, e.p),
    }
    s
}

/// Scatter (`vcounts == None`) or scatterv.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn scatter(
    e: &Env,
    send: &Arg,
    vcounts: Option<(&[usize], &[isize])>,
    recv: &Arg,
    root: u32,
) -> Sched {
    let mut s = Sched::new(e.tag);
    let me = e.me;
    let inplace = me == root && recv.in_place();
    // SAFETY: forwarded contract (below as well).
    let out = (!inplace).then(|| unsafe { region(&mut s, recv, false, true) });
    let blocks: Vec<Slice> = if me == root {
        (0..e.p as usize)
            .map(|i| {
                let a = match vcounts {
                    Some((c, d)) => send.at(d[i], c[i]),
                    None => send.at((i * send.count) as isize, send.count),
                };
                // SAFETY: the caller's contract covers every buffer of the call.
                unsafe { region(&mut s, &a, true, false) }
            })
            .collect()
    } else {
        Vec::new()
    };
    match vcounts {
        None => {
            let n = if me == root {
                send.bytes()
            } else {
                recv.bytes()
            };
            algo::scatter(&mut s, me, e.p, root, &blocks, out, n, &e.t);
        }
        Some(_) => algo::scatterv(&mut s, me, root, &blocks, out, e.p),
    }
    s
}

/// Allgather (`vcounts == None`) or allgatherv.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn allgather(
    e: &Env,
    send: &Arg,
    recv: &Arg,
    vcounts: Option<(&[usize], &[isize])>,
) -> Sched {
    let mut s = Sched::new(e.tag);
    let inplace = send.in_place();
    // SAFETY: forwarded contract (below as well).
    let input = (!inplace).then(|| unsafe { region(&mut s, send, true, false) });
    let blocks: Vec<Slice> = (0..e.p as usize)
        .map(|i| {
            let a = match vcounts {
                Some((c, d)) => recv.at(d[i], c[i]),
                None => recv.at((i * recv.count) as isize, recv.count),
            };
            let own = inplace && i == e.me as usize;
            // SAFETY: the caller's contract covers every buffer of the call.
            unsafe { region(&mut s, &a, own, true) }
        })
        .collect();
    algo::allgather(&mut s, e.me, e.p, input, &blocks, &e.t);
    s
}

/// One side of an alltoall: per peer, the block's place (bytes from the buffer), count and
/// type.
pub struct Blocks<'a> {
    pub ptr: *const u8,
    pub counts: &'a [usize],
    pub displs: &'a [isize],
    pub types: &'a [Arc<Datatype>],
}

impl Blocks<'_> {
    fn arg(&self, i: usize) -> Arg {
        Arg::new(
            self.ptr.wrapping_offset(self.displs[i]),
            self.counts[i],
            &self.types[i],
        )
    }
}

/// Alltoall, alltoallv and alltoallw (all as byte displacements and a type per peer);
/// `send.ptr == IN_PLACE` takes the data from the receive buffer.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn alltoall(e: &Env, send: &Blocks<'_>, recv: &Blocks<'_>) -> Sched {
    let mut s = Sched::new(e.tag);
    let inplace = std::ptr::eq(send.ptr, IN_PLACE);
    let p = e.p as usize;
    // SAFETY: forwarded contract (both maps).
    let input: Vec<Slice> = (0..p)
        // SAFETY: the caller's contract covers every buffer of the call.
        .map(|i| unsafe {
            if inplace {
                snapshot(&mut s, &recv.arg(i))
            } else {
                region(&mut s, &send.arg(i), true, false)
            }
        })
        .collect();
    let out: Vec<Slice> = (0..p)
        // SAFETY: the caller's contract covers every buffer of the call.
        .map(|i| unsafe { region(&mut s, &recv.arg(i), false, true) })
        .collect();
    algo::alltoall(&mut s, e.me, e.p, &input, &out, &e.t);
    s
}

/// Reduce (`root == Some`) or allreduce (`None`) of `count` elements.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn reduce(
    e: &Env,
    send: *const u8,
    recv: *mut u8,
    count: usize,
    red: Reduction,
    root: Option<u32>,
) -> Sched {
    let mut s = Sched::new(e.tag);
    let dt = red.dt.clone();
    let commutative = red.op.commutative();
    let esize = red.esize();
    s.set_reduction(red);
    let send = Arg::new(send, count, &dt);
    let recv = Arg::new(recv, count, &dt);
    let me = e.me;
    let inplace = send.in_place();
    // SAFETY: forwarded contract (below as well).
    let input = (!inplace).then(|| unsafe { region(&mut s, &send, true, false) });
    match root {
        Some(root) => {
            // SAFETY: the caller's contract covers every buffer of the call.
            let out = (me == root).then(|| unsafe { region(&mut s, &recv, inplace, true) });
            algo::reduce(&mut s, me, e.p, root, input, out, esize, commutative, &e.t);
        }
        None => {
            // SAFETY: the caller's contract covers every buffer of the call.
            let buf = unsafe { region(&mut s, &recv, inplace, true) };
            if let Some(i) = input {
                s.copy(i, buf);
                s.end_round();
            }
            algo::allreduce(&mut s, me, e.p, buf, esize, commutative, &e.t);
        }
    }
    s
}

/// Reduce-scatter: rank i gets `counts[i]` elements of the reduction.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn reduce_scatter(
    e: &Env,
    send: *const u8,
    recv: *mut u8,
    counts: &[usize],
    red: Reduction,
) -> Sched {
    let mut s = Sched::new(e.tag);
    let dt = red.dt.clone();
    let commutative = red.op.commutative();
    let esize = red.esize();
    s.set_reduction(red);
    let total: usize = counts.iter().sum();
    let send = Arg::new(send, total, &dt);
    // SAFETY: forwarded contract (below as well).
    let input = if send.in_place() {
        // SAFETY: the caller's contract covers every buffer of the call.
        unsafe { snapshot(&mut s, &Arg::new(recv, total, &dt)) }
    } else {
        // SAFETY: the caller's contract covers every buffer of the call.
        unsafe { region(&mut s, &send, true, false) }
    };
    // SAFETY: the caller's contract covers every buffer of the call.
    let out = unsafe {
        region(
            &mut s,
            &Arg::new(recv, counts[e.me as usize], &dt),
            false,
            true,
        )
    };
    algo::reduce_scatter(
        &mut s,
        e.me,
        e.p,
        input,
        out,
        counts,
        esize,
        commutative,
        &e.t,
    );
    s
}

/// Scan (inclusive) or exscan.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn scan(
    e: &Env,
    send: *const u8,
    recv: *mut u8,
    count: usize,
    red: Reduction,
    exclusive: bool,
) -> Sched {
    let mut s = Sched::new(e.tag);
    let dt = red.dt.clone();
    s.set_reduction(red);
    let send = Arg::new(send, count, &dt);
    let recv = Arg::new(recv, count, &dt);
    let inplace = send.in_place();
    // SAFETY: forwarded contract (below as well).
    let out = unsafe { region(&mut s, &recv, inplace, true) };
    let input = if inplace {
        // The output is written before the last input is read: keep a copy.
        // SAFETY: the caller's contract covers every buffer of the call.
        unsafe { snapshot(&mut s, &recv) }
    } else {
        // SAFETY: the caller's contract covers every buffer of the call.
        unsafe { region(&mut s, &send, true, false) }
    };
    algo::scan(&mut s, e.me, e.p, input, out, exclusive);
    s
}

/// A process's neighbors in a topology: where block k comes from and where block k goes
/// (`None`: `MPI_PROC_NULL`, block untouched), and the order to post the sends in.
pub struct Neighbors {
    pub sources: Vec<Option<u32>>,
    pub dests: Vec<Option<u32>>,
    /// Indices of `dests` in posting order.
    pub send_order: Vec<usize>,
}

impl Neighbors {
    /// A Cartesian grid: per dimension, the neighbor at -1, then at +1 (the standard's
    /// order). Sends go +1 first, so that with both neighbors the same process (a
    /// periodic dimension of 1 or 2) the block for +1 meets that process's receive from
    /// its -1, which it posts first.
    pub fn cart(dims: &[i32], periods: &[bool], me: u32) -> Neighbors {
        let at = crate::topo::Topo::coords(dims, me as i32);
        let mut v = Vec::new();
        let mut send_order = Vec::new();
        for d in 0..dims.len() {
            for off in [-1, 1] {
                let mut x = at.clone();
                x[d] += off;
                v.push(crate::topo::Topo::rank(dims, periods, &x).map(|r| r as u32));
            }
            send_order.extend([2 * d + 1, 2 * d]);
        }
        Neighbors {
            sources: v.clone(),
            dests: v,
            send_order,
        }
    }

    /// A graph: the edges of this process, in order, both ways.
    pub fn graph(index: &[i32], edges: &[i32], me: u32) -> Neighbors {
        let lo = if me == 0 {
            0
        } else {
            index[me as usize - 1] as usize
        };
        let hi = index[me as usize] as usize;
        let v: Vec<Option<u32>> = edges[lo..hi].iter().map(|&e| Some(e as u32)).collect();
        Neighbors {
            send_order: (0..v.len()).collect(),
            sources: v.clone(),
            dests: v,
        }
    }

    /// A distributed graph: its sources and destinations, in order (weights do not
    /// change what moves). A source named twice sends twice, and the receives from it
    /// match its sends in order.
    pub fn dist_graph(sources: &[i32], dests: &[i32]) -> Neighbors {
        let some = |v: &[i32]| v.iter().map(|&r| Some(r as u32)).collect();
        Neighbors {
            sources: some(sources),
            dests: some(dests),
            send_order: (0..dests.len()).collect(),
        }
    }
}

/// Neighbor allgather (`same_send`: every destination gets `send[0]`) and alltoall(v/w):
/// `send` and `recv` as [`Blocks`] per neighbor.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn neighbor(
    e: &Env,
    nb: &Neighbors,
    send: &Blocks<'_>,
    recv: &Blocks<'_>,
    same_send: bool,
) -> Sched {
    let mut s = Sched::new(e.tag);
    let recvs: Vec<(u32, Slice)> = nb
        .sources
        .iter()
        .enumerate()
        .filter_map(|(k, src)| {
            // SAFETY: the caller's contract covers every block.
            src.map(|from| (from, unsafe { region(&mut s, &recv.arg(k), false, true) }))
        })
        .collect();
    let one = if same_send && !nb.dests.is_empty() {
        // SAFETY: as above.
        Some(unsafe { region(&mut s, &send.arg(0), true, false) })
    } else {
        None
    };
    let sends: Vec<(u32, Slice)> = nb
        .send_order
        .iter()
        .filter_map(|&k| {
            nb.dests[k].map(|to| {
                let b = match one {
                    Some(b) => b,
                    // SAFETY: as above.
                    None => unsafe { region(&mut s, &send.arg(k), true, false) },
                };
                (to, b)
            })
        })
        .collect();
    algo::neighbor(&mut s, &recvs, &sends);
    s
}
