//! Collectives on intercommunicators (MPI-3.1 5.2.3): the data of one group goes to the
//! other. A rooted call names the root in the remote group; in the root's own group the
//! root passes `MPI_ROOT` and the others `MPI_PROC_NULL`.
//!
//! Every call here is a direct exchange between the two groups over the
//! intercommunicator's collective context: each process sends its part straight to each
//! remote process that needs it and receives straight from each one it needs, and a
//! reduction is computed by each receiver in the remote group's rank order (so operations
//! that do not commute give the standard's result). That is `n * m` messages for groups
//! of `n` and `m`, no tree: meant for correctness at the sizes programs use
//! intercommunicators at, not for speed. A non-blocking call (`MPI_Ibcast`, ...) on an
//! intercommunicator completes before it returns and gives a request that is already
//! complete. `MPI_Scan`, `MPI_Exscan` and the neighbourhood collectives are not defined on
//! intercommunicators and are refused.

use std::os::raw::{c_int, c_void};

use bulkwire_p2p::{Source, Tag};

use super::{A2a, Call, R, Side};
use crate::comm::{self, Communicator};
use crate::datatype::Datatype;
use crate::error::*;
use crate::handle::Raw;
use crate::net::ReqId;
use crate::op::Op;
use crate::predef::{MPI_PROC_NULL, MPI_ROOT};
use crate::request;
use crate::runtime::{code_of, p2p};

/// The call on `h` if `h` is an intercommunicator (`None`: an intra-communicator, or not
/// a communicator at all, which the intra-communicator path reports).
pub(super) fn call(h: Raw, what: &'static str) -> Option<Call> {
    // Borrowed first: most calls are on intracommunicators, and this costs them nothing.
    match comm::lookup_ref(h) {
        Ok(c) if c.is_inter() => Some(Call { h, c, what }),
        _ => None,
    }
}

/// Where a rooted call's root is, as this process sees it.
enum Root {
    /// This process is the root (`MPI_ROOT`).
    Me,
    /// The root is another process of this group (`MPI_PROC_NULL`): nothing to do.
    Idle,
    /// The root is this remote rank.
    Remote(u32),
}

/// The messages of one collective call, posted together and waited for together.
struct Exchange<'a> {
    c: &'a Communicator,
    tag: i32,
    reqs: Vec<ReqId>,
    /// Buffers of the messages in flight (their heap blocks never move).
    sent: Vec<Vec<u8>>,
    recvd: Vec<Vec<u8>>,
}

impl<'a> Exchange<'a> {
    fn new(call: &'a Call) -> Exchange<'a> {
        let seq = call.c.next_coll_tag();
        Exchange {
            c: &call.c,
            tag: (i32::from(call.c.ctx + 1) << 16) | i32::from(seq),
            reqs: Vec::new(),
            sent: Vec::new(),
            recvd: Vec::new(),
        }
    }

    fn send(&mut self, to: u32, data: Vec<u8>) -> R<()> {
        let p = p2p()?;
        // SAFETY: `data` is kept in `sent` until the request completes in `wait`.
        let id = unsafe { p.isend_raw(self.c.peer_world(to), self.tag, data.as_ptr(), data.len()) }
            .map_err(|e| code_of(&e))?;
        self.sent.push(data);
        self.reqs.push(id);
        Ok(())
    }

    /// Posts a receive of `len` bytes from remote rank `from`; its index in the results.
    fn recv(&mut self, from: u32, len: usize) -> R<usize> {
        let p = p2p()?;
        let mut buf = vec![0u8; len];
        let src = Source::Rank(self.c.peer_world(from));
        // SAFETY: `buf` is kept in `recvd` until the request completes in `wait`.
        let id = unsafe { p.irecv_raw(src, Tag::Is(self.tag), buf.as_mut_ptr(), len) }
            .map_err(|e| code_of(&e))?;
        self.recvd.push(buf);
        self.reqs.push(id);
        Ok(self.recvd.len() - 1)
    }

    /// Waits for every message; the received buffers, in the order they were posted.
    fn wait(&mut self) -> R<Vec<Vec<u8>>> {
        let p = p2p()?;
        let mut res = Ok(());
        for id in self.reqs.drain(..) {
            if let Err(e) = p.wait_raw(id)
                && res.is_ok()
            {
                res = Err(code_of(&e));
            }
        }
        self.sent.clear();
        res.map(|()| std::mem::take(&mut self.recvd))
    }
}

impl Call {
    fn remote_size(&self) -> u32 {
        self.c.peers().size()
    }

    fn inter_root(&self, root: c_int) -> R<Root> {
        match root {
            MPI_ROOT => Ok(Root::Me),
            MPI_PROC_NULL => Ok(Root::Idle),
            r if r >= 0 && (r as u32) < self.remote_size() => Ok(Root::Remote(r as u32)),
            r => Err(self.err(
                MPI_ERR_ROOT,
                format_args!(
                    "root {r} is neither MPI_ROOT, MPI_PROC_NULL nor a rank of the remote group (size {})",
                    self.remote_size()
                ),
            )),
        }
    }

    /// `n` non-negative counts from a C array.
    ///
    /// # Safety
    /// `a` must hold `n` ints (checked for NULL).
    unsafe fn counts_n(&self, a: *const c_int, n: u32, name: &str) -> R<Vec<usize>> {
        if a.is_null() {
            return Err(self.err(MPI_ERR_ARG, format_args!("{name} is NULL")));
        }
        // SAFETY: the caller's contract.
        let s = unsafe { std::slice::from_raw_parts(a, n as usize) };
        s.iter()
            .enumerate()
            .map(|(i, &x)| self.count(x, &format!("{name}[{i}]")))
            .collect()
    }

    /// # Safety
    /// `a` must hold `n` ints (checked for NULL).
    unsafe fn displs_n(&self, a: *const c_int, n: u32, name: &str) -> R<Vec<isize>> {
        if a.is_null() {
            return Err(self.err(MPI_ERR_ARG, format_args!("{name} is NULL")));
        }
        // SAFETY: the caller's contract.
        let s = unsafe { std::slice::from_raw_parts(a, n as usize) };
        Ok(s.iter().map(|&d| d as isize).collect())
    }

    /// The blocks of a rooted or gathering call over the `m` remote processes: counts and
    /// displacements (in elements) from `v`, else `count` each, one after another.
    ///
    /// # Safety
    /// `v`'s arrays must hold `m` ints each.
    unsafe fn layout(
        &self,
        v: Option<(*const c_int, *const c_int)>,
        count: c_int,
        side: &str,
    ) -> R<(Vec<usize>, Vec<isize>)> {
        let m = self.remote_size();
        match v {
            // SAFETY: the caller's contract.
            Some((c, dp)) => unsafe {
                Ok((
                    self.counts_n(c, m, &format!("{side}counts"))?,
                    self.displs_n(dp, m, "displs")?,
                ))
            },
            None => {
                let n = self.count(count, &format!("{side}count"))?;
                Ok((
                    vec![n; m as usize],
                    (0..m as usize).map(|i| (i * n) as isize).collect(),
                ))
            }
        }
    }

    /// One side of an alltoall over the `m` remote processes: counts, byte
    /// displacements, types.
    ///
    /// # Safety
    /// The C call's contract for the arrays.
    unsafe fn blocks(&self, a: &A2a, side: &str) -> R<Side> {
        let m = self.remote_size();
        match *a {
            A2a::Same(n, t) => {
                let d = self.dt(t, &format!("{side}type"))?;
                let n = self.count(n, &format!("{side}count"))?;
                let ext = d.extent();
                Ok((
                    vec![n; m as usize],
                    (0..m as usize).map(|i| (i * n) as isize * ext).collect(),
                    vec![d; m as usize],
                ))
            }
            A2a::V(c, dp, t) => {
                let d = self.dt(t, &format!("{side}type"))?;
                // SAFETY: the caller's contract: m counts and displacements.
                let (c, dp) = unsafe {
                    (
                        self.counts_n(c, m, &format!("{side}counts"))?,
                        self.displs_n(dp, m, &format!("{side}displs"))?,
                    )
                };
                let ext = d.extent();
                Ok((
                    c,
                    dp.iter().map(|&x| x * ext).collect(),
                    vec![d; m as usize],
                ))
            }
            A2a::W(c, dp, t) => {
                if t.is_null() {
                    return Err(self.err(MPI_ERR_ARG, format_args!("{side}types is NULL")));
                }
                // SAFETY: the caller's contract: m counts, displacements and types.
                let (c, dp, ts) = unsafe {
                    (
                        self.counts_n(c, m, &format!("{side}counts"))?,
                        self.displs_n(dp, m, &format!("{side}displs"))?,
                        std::slice::from_raw_parts(t, m as usize),
                    )
                };
                let ts = ts
                    .iter()
                    .enumerate()
                    .map(|(i, &h)| self.dt(h, &format!("{side}types[{i}]")))
                    .collect::<R<Vec<_>>>()?;
                Ok((c, dp, ts))
            }
        }
    }

    fn failed(&self, e: c_int) -> c_int {
        self.err(e, "the collective failed")
    }

    /// The request of a non-blocking call, complete (the work is done).
    fn complete(&self, req: Option<*mut Raw>) -> R<()> {
        if let Some(r) = req {
            if r.is_null() {
                return Err(self.err(MPI_ERR_REQUEST, "request is NULL"));
            }
            // SAFETY: non-null; the caller's contract.
            unsafe { *r = request::completed() };
        }
        Ok(())
    }
}

/// `count` elements of `d` at `p`, packed.
///
/// # Safety
/// `p` must hold `count` elements of `d`.
unsafe fn pack(p: *const c_void, count: usize, d: &Datatype) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * d.size());
    // SAFETY: the caller's contract.
    unsafe { d.pack(p.cast(), count, &mut out) };
    out
}

/// `p` displaced by `bytes`.
fn at(p: *const c_void, bytes: isize) -> *mut u8 {
    p.cast::<u8>().cast_mut().wrapping_offset(bytes)
}

/// The reduction of `parts` (packed, in the remote group's rank order) into the first.
fn fold(
    call: &Call,
    mut parts: Vec<Vec<u8>>,
    n: usize,
    d: &Datatype,
    dh: Raw,
    o: &Op,
) -> R<Vec<u8>> {
    // acc = p0 op p1 op ... : each step computes p_i = acc op p_i.
    let mut acc = parts.remove(0);
    for mut p in parts {
        // SAFETY: both hold n packed elements of d, disjoint.
        unsafe { o.apply_packed(acc.as_ptr(), p.as_mut_ptr(), n, d, dh) }
            .map_err(|e| call.err(e, "the operation is not defined on the datatype"))?;
        acc = p;
    }
    Ok(acc)
}

pub(super) fn barrier(call: &Call, req: Option<*mut Raw>) -> R<()> {
    let mut x = Exchange::new(call);
    let m = call.remote_size();
    (|| {
        for r in 0..m {
            x.recv(r, 0)?;
        }
        for r in 0..m {
            x.send(r, Vec::new())?;
        }
        x.wait()
    })()
    .map_err(|e| call.failed(e))?;
    call.complete(req)
}

/// # Safety
/// The C call's contract.
pub(super) unsafe fn bcast(
    call: &Call,
    buf: *mut c_void,
    count: c_int,
    dt: Raw,
    root: c_int,
    req: Option<*mut Raw>,
) -> R<()> {
    let root = call.inter_root(root)?;
    let mut x = Exchange::new(call);
    match root {
        Root::Idle => {}
        Root::Me => {
            let n = call.count(count, "count")?;
            let d = call.dt(dt, "datatype")?;
            // SAFETY: the caller's contract.
            let data = unsafe { pack(buf, n, &d) };
            for r in 0..call.remote_size() {
                x.send(r, data.clone()).map_err(|e| call.failed(e))?;
            }
            x.wait().map_err(|e| call.failed(e))?;
        }
        Root::Remote(r) => {
            let n = call.count(count, "count")?;
            let d = call.dt(dt, "datatype")?;
            // SAFETY: the caller's contract: buf holds n elements of d.
            unsafe { recv_block(&mut x, call, r, buf, n, &d) }?;
        }
    }
    call.complete(req)
}

/// Receives one block of `n` elements of `d` from remote rank `r` into `buf`: what a
/// non-root process of a rooted call gets from the root.
///
/// # Safety
/// `buf` holds `n` elements of `d`.
unsafe fn recv_block(
    x: &mut Exchange,
    call: &Call,
    r: u32,
    buf: *mut c_void,
    n: usize,
    d: &Datatype,
) -> R<()> {
    x.recv(r, n * d.size()).map_err(|e| call.failed(e))?;
    let got = x.wait().map_err(|e| call.failed(e))?;
    // SAFETY: the caller's contract.
    unsafe { d.unpack(&got[0], buf.cast(), n) };
    Ok(())
}

/// Gather and gatherv (`v`: the root's counts and displacements, one per remote
/// process).
///
/// # Safety
/// The C call's contract.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gather(
    call: &Call,
    sbuf: *const c_void,
    scount: c_int,
    sdt: Raw,
    rbuf: *mut c_void,
    rcount: c_int,
    v: Option<(*const c_int, *const c_int)>,
    rdt: Raw,
    root: c_int,
    req: Option<*mut Raw>,
) -> R<()> {
    let root = call.inter_root(root)?;
    let mut x = Exchange::new(call);
    match root {
        Root::Idle => {}
        Root::Me => {
            let m = call.remote_size();
            let d = call.dt(rdt, "recvtype")?;
            let ext = d.extent();
            // SAFETY: the caller's contract: m counts and displacements.
            let (counts, displs) = unsafe { call.layout(v, rcount, "recv") }?;
            for r in 0..m {
                x.recv(r, counts[r as usize] * d.size())
                    .map_err(|e| call.failed(e))?;
            }
            let got = x.wait().map_err(|e| call.failed(e))?;
            for (i, g) in got.iter().enumerate() {
                // SAFETY: the caller's contract: block i of rbuf holds counts[i] of d.
                unsafe { d.unpack(g, at(rbuf, displs[i] * ext), counts[i]) };
            }
        }
        Root::Remote(r) => {
            let d = call.dt(sdt, "sendtype")?;
            let n = call.count(scount, "sendcount")?;
            // SAFETY: the caller's contract.
            let data = unsafe { pack(sbuf, n, &d) };
            x.send(r, data).map_err(|e| call.failed(e))?;
            x.wait().map_err(|e| call.failed(e))?;
        }
    }
    call.complete(req)
}

/// Scatter and scatterv.
///
/// # Safety
/// The C call's contract.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scatter(
    call: &Call,
    sbuf: *const c_void,
    scount: c_int,
    v: Option<(*const c_int, *const c_int)>,
    sdt: Raw,
    rbuf: *mut c_void,
    rcount: c_int,
    rdt: Raw,
    root: c_int,
    req: Option<*mut Raw>,
) -> R<()> {
    let root = call.inter_root(root)?;
    let mut x = Exchange::new(call);
    match root {
        Root::Idle => {}
        Root::Me => {
            let m = call.remote_size();
            let d = call.dt(sdt, "sendtype")?;
            let ext = d.extent();
            // SAFETY: the caller's contract: m counts and displacements.
            let (counts, displs) = unsafe { call.layout(v, scount, "send") }?;
            for r in 0..m as usize {
                // SAFETY: the caller's contract: block r of sbuf holds counts[r] of d.
                let data = unsafe { pack(at(sbuf, displs[r] * ext).cast(), counts[r], &d) };
                x.send(r as u32, data).map_err(|e| call.failed(e))?;
            }
            x.wait().map_err(|e| call.failed(e))?;
        }
        Root::Remote(r) => {
            let d = call.dt(rdt, "recvtype")?;
            let n = call.count(rcount, "recvcount")?;
            // SAFETY: the caller's contract: rbuf holds n elements of d.
            unsafe { recv_block(&mut x, call, r, rbuf, n, &d) }?;
        }
    }
    call.complete(req)
}

/// Allgather and allgatherv: every process's data to every remote process; the
/// receive counts and displacements are per remote process.
///
/// # Safety
/// The C call's contract.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn allgather(
    call: &Call,
    sbuf: *const c_void,
    scount: c_int,
    sdt: Raw,
    rbuf: *mut c_void,
    rcount: c_int,
    v: Option<(*const c_int, *const c_int)>,
    rdt: Raw,
    req: Option<*mut Raw>,
) -> R<()> {
    let m = call.remote_size();
    let d = call.dt(rdt, "recvtype")?;
    let ext = d.extent();
    // SAFETY: the caller's contract: m counts and displacements.
    let (counts, displs) = unsafe { call.layout(v, rcount, "recv") }?;
    let sd = call.dt(sdt, "sendtype")?;
    let sn = call.count(scount, "sendcount")?;
    // SAFETY: the caller's contract.
    let data = unsafe { pack(sbuf, sn, &sd) };
    let mut x = Exchange::new(call);
    let got = (|| {
        for r in 0..m {
            x.recv(r, counts[r as usize] * d.size())?;
        }
        for r in 0..m {
            x.send(r, data.clone())?;
        }
        x.wait()
    })()
    .map_err(|e| call.failed(e))?;
    for (i, g) in got.iter().enumerate() {
        // SAFETY: the caller's contract.
        unsafe { d.unpack(g, at(rbuf, displs[i] * ext), counts[i]) };
    }
    call.complete(req)
}

/// Alltoall, alltoallv and alltoallw: block `j` to remote process `j`, block `j` from it.
///
/// # Safety
/// The C call's contract.
pub(super) unsafe fn alltoall(
    call: &Call,
    sbuf: *const c_void,
    s: &A2a,
    rbuf: *mut c_void,
    r: &A2a,
    req: Option<*mut Raw>,
) -> R<()> {
    // SAFETY: the caller's contract.
    let (rc, rd, rt) = unsafe { call.blocks(r, "recv")? };
    // SAFETY: the caller's contract.
    let (sc, sd, st) = unsafe { call.blocks(s, "send")? };
    let m = call.remote_size();
    let mut x = Exchange::new(call);
    let got = (|| {
        for j in 0..m as usize {
            x.recv(j as u32, rc[j] * rt[j].size())?;
        }
        for j in 0..m as usize {
            // SAFETY: the caller's contract: block j of sbuf.
            let data = unsafe { pack(at(sbuf, sd[j]).cast(), sc[j], &st[j]) };
            x.send(j as u32, data)?;
        }
        x.wait()
    })()
    .map_err(|e| call.failed(e))?;
    for (j, g) in got.iter().enumerate() {
        // SAFETY: the caller's contract: block j of rbuf.
        unsafe { rt[j].unpack(g, at(rbuf, rd[j]), rc[j]) };
    }
    call.complete(req)
}

/// Reduce (`root`: `Some`) and allreduce: the reduction of the remote group's data.
///
/// # Safety
/// The C call's contract.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn reduce(
    call: &Call,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    count: c_int,
    dt: Raw,
    oh: Raw,
    root: Option<c_int>,
    req: Option<*mut Raw>,
) -> R<()> {
    let root = root.map(|r| call.inter_root(r)).transpose()?;
    if matches!(root, Some(Root::Idle)) {
        Exchange::new(call);
        return call.complete(req);
    }
    let n = call.count(count, "count")?;
    let d = call.dt(dt, "datatype")?;
    let o = call.op(oh)?;
    call.reduction(&o, oh, &d, dt)?;
    let m = call.remote_size();
    let mut x = Exchange::new(call);
    let (gets, sends): (bool, Vec<u32>) = match root {
        Some(Root::Me) => (true, vec![]),
        Some(Root::Remote(r)) => (false, vec![r]),
        Some(Root::Idle) => unreachable!("returned above"),
        None => (true, (0..m).collect()),
    };
    let got = (|| {
        if gets {
            for r in 0..m {
                x.recv(r, n * d.size())?;
            }
        }
        if !sends.is_empty() {
            // SAFETY: the caller's contract.
            let data = unsafe { pack(sbuf, n, &d) };
            for &r in &sends {
                x.send(r, data.clone())?;
            }
        }
        x.wait()
    })()
    .map_err(|e| call.failed(e))?;
    if gets && m > 0 {
        let res = fold(call, got, n, &d, dt, &o)?;
        // SAFETY: the caller's contract.
        unsafe { d.unpack(&res, rbuf.cast(), n) };
    }
    call.complete(req)
}

/// Reduce_scatter (`counts`: one per process of this group) and reduce_scatter_block:
/// the reduction of the remote group's data, scattered over this group.
///
/// # Safety
/// The C call's contract.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn reduce_scatter(
    call: &Call,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    counts: Result<*const c_int, c_int>,
    dt: Raw,
    oh: Raw,
    req: Option<*mut Raw>,
) -> R<()> {
    let local = call.c.size();
    let m = call.remote_size();
    let d = call.dt(dt, "datatype")?;
    let o = call.op(oh)?;
    call.reduction(&o, oh, &d, dt)?;
    let mut x = Exchange::new(call);
    // The remote group's counts say how this process's data is cut: with one count
    // (block) they follow from the sizes; with a count each they are exchanged first.
    let (mine, theirs) = match counts {
        // Each side's data is its own group's size times its own count (MPI-3.1 5.10.1),
        // cut into one block per remote process.
        Err(n) => {
            let n = call.count(n, "recvcount")?;
            let total = n * local as usize;
            if m > 0 && !total.is_multiple_of(m as usize) {
                return Err(call.err(
                    MPI_ERR_COUNT,
                    format_args!(
                        "{local} x recvcount {n} cannot be cut into {m} equal blocks for the remote group"
                    ),
                ));
            }
            (n, vec![total / (m.max(1) as usize); m as usize])
        }
        Ok(c) => {
            // SAFETY: the caller's contract: one count per process of this group.
            let cs = unsafe { call.counts_n(c, local, "recvcounts")? };
            let wire: Vec<u8> = cs.iter().flat_map(|&n| (n as u64).to_le_bytes()).collect();
            let got = (|| {
                for r in 0..m {
                    x.recv(r, 8 * m as usize)?;
                }
                for r in 0..m {
                    x.send(r, wire.clone())?;
                }
                x.wait()
            })()
            .map_err(|e| call.failed(e))?;
            let theirs = match got.first() {
                Some(g) => g
                    .chunks_exact(8)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize)
                    .collect(),
                None => vec![0; m as usize],
            };
            (cs[call.c.rank as usize], theirs)
        }
    };
    let ext = d.extent();
    let got = (|| {
        for r in 0..m {
            x.recv(r, mine * d.size())?;
        }
        let mut off = 0usize;
        for (j, &n) in theirs.iter().enumerate() {
            // SAFETY: the caller's contract: sbuf holds the sum of the remote counts.
            let data = unsafe { pack(at(sbuf, off as isize * ext).cast(), n, &d) };
            x.send(j as u32, data)?;
            off += n;
        }
        x.wait()
    })()
    .map_err(|e| call.failed(e))?;
    if m > 0 {
        let res = fold(call, got, mine, &d, dt, &o)?;
        // SAFETY: the caller's contract.
        unsafe { d.unpack(&res, rbuf.cast(), mine) };
    }
    call.complete(req)
}
