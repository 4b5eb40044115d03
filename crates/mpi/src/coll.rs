//! Every MPI collective, blocking and non-blocking.
//!
//! A collective call becomes a schedule (`sched`): rounds of sends, receives and local
//! reductions over the communicator's collective channel (`crate::net::Net`), built by the
//! algorithms in `algo` from the call's arguments (`plan`). A blocking call runs its
//! schedule to completion; a non-blocking one hands it to the request table, whose
//! `MPI_Wait`/`MPI_Test` move it on (`Operation::progress`).
//!
//! Blocking calls on a communicator with the processes of `MPI_COMM_WORLD` in its order go
//! through `bulkwire_collectives::Coll` over the world's p2p communicator instead (`world`),
//! which has the network cache when every process is on one host: movement collectives
//! always (non-contiguous data packed first, so every process takes the same path whatever
//! its types), reductions when the operation and type are ones it computes.

pub mod algo;
mod inter;
pub mod nonblocking;
pub mod plan;
pub mod sched;
pub mod world;

#[cfg(test)]
mod tests;

use std::fmt::Display;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

use self::plan::{Arg, Blocks, Env, IN_PLACE};
use self::sched::Sched;
use crate::comm::{self, Communicator};
use crate::datatype::{self, Datatype};
use crate::error::*;
use crate::handle::{Raw, Ref};
use crate::op::{self, Op};
use crate::request;
use crate::runtime;

const MPI_COMM_WORLD: Raw = 0x101;

/// Reports an error of a call without a communicator through `MPI_COMM_WORLD`'s handler.
pub(crate) fn fail_world(code: c_int, what: impl Display) -> c_int {
    runtime::fail(MPI_COMM_WORLD, code, what)
}

/// One collective call: its communicator and name, for checks and error reports. Errors
/// are reported through the communicator's handler when they arise; `Err` carries what
/// the handler returned.
struct Call {
    h: Raw,
    c: Ref<Communicator>,
    what: &'static str,
}

type R<T> = Result<T, c_int>;

impl Call {
    fn new(h: Raw, what: &'static str) -> R<Call> {
        match comm::lookup_ref(h) {
            Ok(c) => {
                // Intercommunicators take `inter`'s path before this; what reaches here
                // on one (scans, neighbourhood collectives) is not defined on them.
                comm::intra(what, &c, h)?;
                Ok(Call { h, c, what })
            }
            Err(e) => Err(fail_world(
                e,
                format_args!("{what}: {h:#x} is not a communicator"),
            )),
        }
    }

    fn err(&self, code: c_int, problem: impl Display) -> c_int {
        runtime::fail(self.h, code, format_args!("{}: {problem}", self.what))
    }

    fn me(&self) -> u32 {
        self.c.rank
    }

    fn p(&self) -> u32 {
        self.c.size()
    }

    fn env(&self) -> Env {
        Env {
            me: self.c.rank,
            p: self.c.size(),
            tag: self.c.next_coll_tag(),
            t: runtime::coll_config().thresholds,
        }
    }

    fn count(&self, n: c_int, name: &str) -> R<usize> {
        usize::try_from(n)
            .map_err(|_| self.err(MPI_ERR_COUNT, format_args!("{name} {n} is negative")))
    }

    fn dt(&self, h: Raw, name: &str) -> R<Arc<Datatype>> {
        self.dt_ref(h, name).map(|d| d.arc())
    }

    /// [`Call::dt`] lending a predefined type.
    fn dt_ref(&self, h: Raw, name: &str) -> R<Ref<Datatype>> {
        match datatype::lookup_ref(h) {
            Ok(d) if d.committed() => Ok(d),
            Ok(_) => Err(self.err(MPI_ERR_TYPE, format_args!("{name} {h:#x} is not committed"))),
            Err(e) => Err(self.err(e, format_args!("{name} {h:#x} is not a datatype"))),
        }
    }

    fn root(&self, r: c_int) -> R<u32> {
        match u32::try_from(r) {
            Ok(r) if r < self.p() => Ok(r),
            _ => Err(self.err(
                MPI_ERR_ROOT,
                format_args!("root {r} is outside the communicator (size {})", self.p()),
            )),
        }
    }

    fn op(&self, h: Raw) -> R<Arc<Op>> {
        op::lookup(h).map_err(|e| self.err(e, format_args!("{h:#x} is not an operation")))
    }

    /// Checks that the operation is defined on the type, without making the reduction
    /// (the collectives layer's path needs none).
    fn reduction_ok(&self, o: &Op, oh: Raw, d: &Datatype, dh: Raw) -> R<()> {
        plan::reduction_ok(o, d).map_err(|e| {
            self.err(
                e,
                format_args!("operation {oh:#x} is not defined on datatype {dh:#x}"),
            )
        })
    }

    fn reduction(&self, o: &Arc<Op>, oh: Raw, d: &Arc<Datatype>, dh: Raw) -> R<sched::Reduction> {
        plan::reduction(o, d, dh).map_err(|e| {
            self.err(
                e,
                format_args!("operation {oh:#x} is not defined on datatype {dh:#x}"),
            )
        })
    }

    /// `p` counts from a C array.
    ///
    /// # Safety
    /// `a` must hold `p` ints (checked for NULL).
    unsafe fn counts(&self, a: *const c_int, name: &str) -> R<Vec<usize>> {
        if a.is_null() {
            return Err(self.err(MPI_ERR_ARG, format_args!("{name} is NULL")));
        }
        // SAFETY: the caller's contract.
        let s = unsafe { std::slice::from_raw_parts(a, self.p() as usize) };
        s.iter()
            .enumerate()
            .map(|(i, &n)| self.count(n, &format!("{name}[{i}]")))
            .collect()
    }

    /// # Safety
    /// As [`Call::counts`].
    unsafe fn displs(&self, a: *const c_int, name: &str) -> R<Vec<isize>> {
        if a.is_null() {
            return Err(self.err(MPI_ERR_ARG, format_args!("{name} is NULL")));
        }
        // SAFETY: the caller's contract.
        let s = unsafe { std::slice::from_raw_parts(a, self.p() as usize) };
        Ok(s.iter().map(|&d| d as isize).collect())
    }

    /// Runs the schedule (blocking) or starts it as a request.
    fn finish(&self, mut s: Sched, req: Option<*mut Raw>) -> R<()> {
        match req {
            None => {
                let net = self.c.net();
                s.run(&net)
                    .map_err(|e| self.err(e, "the collective failed"))
            }
            Some(r) => {
                let h = request::start_operation(Box::new(nonblocking::start(self.c.arc(), s)));
                // SAFETY: checked non-null by `request_ptr`; the caller's contract.
                unsafe { *r = h };
                Ok(())
            }
        }
    }

    fn request_ptr(&self, r: *mut Raw) -> R<Option<*mut Raw>> {
        if r.is_null() {
            return Err(self.err(MPI_ERR_REQUEST, "request is NULL"));
        }
        Ok(Some(r))
    }
}

fn code(r: R<()>) -> c_int {
    match r {
        Ok(()) => MPI_SUCCESS,
        Err(e) => e,
    }
}

fn is_in_place(p: *const c_void) -> bool {
    std::ptr::eq(p.cast::<u8>(), IN_PLACE)
}

// ---- the calls, each blocking and non-blocking ------------------------------------------

fn barrier(comm: Raw, req: Option<*mut Raw>, what: &'static str) -> R<()> {
    if let Some(call) = inter::call(comm, what) {
        return inter::barrier(&call, req);
    }
    let call = Call::new(comm, what)?;
    let req = req.map(|r| call.request_ptr(r)).transpose()?.flatten();
    if req.is_none()
        && let Some(r) = world::barrier(&call.c)
    {
        return r.map_err(|(e, m)| call.err(e, m));
    }
    call.finish(plan::barrier(&call.env()), req)
}

/// # Safety
/// The C call's contract.
unsafe fn bcast(
    buf: *mut c_void,
    count: c_int,
    dt: Raw,
    root: c_int,
    comm: Raw,
    req: Option<*mut Raw>,
    what: &'static str,
) -> R<()> {
    if let Some(call) = inter::call(comm, what) {
        // SAFETY: the caller's contract.
        return unsafe { inter::bcast(&call, buf, count, dt, root, req) };
    }
    let call = Call::new(comm, what)?;
    let req = req.map(|r| call.request_ptr(r)).transpose()?.flatten();
    let n = call.count(count, "count")?;
    let d = call.dt(dt, "datatype")?;
    let root = call.root(root)?;
    let a = Arg::new(buf.cast(), n, &d);
    if req.is_none() && !bcast_by_p2p(call.p(), n * d.size()) {
        // SAFETY: the caller's contract.
        if let Some(r) = unsafe { world::bcast(&call.c, &a, root) } {
            return r.map_err(|(e, m)| call.err(e, m));
        }
    }
    // SAFETY: the caller's contract: the buffer stays valid until completion.
    call.finish(unsafe { plan::bcast(&call.env(), &a, root) }, req)
}

/// Broadcasts with a single reader go by point-to-point from this many bytes (p2p's
/// single-copy size)...
const BCAST_P2P_MIN: usize = 16 << 10;
/// ... up to this many: at 1 MiB the cache's two copies, pipelined on two cores, beat a
/// single copy on a quiet machine (`docs/collectives.md`, "Single copy, on request").
const BCAST_P2P_MAX: usize = 512 << 10;

/// Whether a blocking broadcast skips the collectives layer for the schedule of
/// point-to-point messages: with a single reader (p = 2), the reader copies the root's
/// buffer once (p2p's single-copy rendezvous, as Open MPI's vader does with CMA) where the
/// network cache copies it twice, into the cache and out, and pipelines the copies only
/// while both processes hold a core (`docs/performance.md`, "MPI programs: the OSU
/// micro-benchmarks"). Where `BULKWIRE_COLL_DIRECT` makes the cache's broadcast a single
/// copy itself, the cache stays. Every input is the same on every process (MPI requires
/// the same number of bytes everywhere; the settings are the job's), so all take the
/// same path.
fn bcast_by_p2p(p: u32, bytes: usize) -> bool {
    p == 2
        && (BCAST_P2P_MIN..=BCAST_P2P_MAX).contains(&bytes)
        && bytes < runtime::coll_config().thresholds.netcache_direct
}

/// Which way a rooted collective moves its blocks.
#[derive(Clone, Copy)]
enum Way {
    Gather,
    Scatter,
}

/// One buffer of a call, with the names its arguments have in errors.
struct Buffer {
    ptr: *const u8,
    count: c_int,
    dt: Raw,
    count_name: &'static str,
    type_name: &'static str,
}

/// Gather(v) and scatter(v): the root's buffer (`rbuf` of a gather, `sbuf` of a scatter)
/// holds a block per process (`v`: their counts and displacements at the root); the
/// other buffer is each process's own block (`MPI_IN_PLACE` at the root: the root's block
/// stays where it is).
///
/// # Safety
/// The C call's contract.
#[allow(clippy::too_many_arguments)]
unsafe fn rooted(
    way: Way,
    sbuf: *const c_void,
    scount: c_int,
    sdt: Raw,
    rbuf: *mut c_void,
    rcount: c_int,
    rdt: Raw,
    v: Option<(*const c_int, *const c_int)>,
    root: c_int,
    comm: Raw,
    req: Option<*mut Raw>,
    what: &'static str,
) -> R<()> {
    if let Some(call) = inter::call(comm, what) {
        // SAFETY: the caller's contract.
        return unsafe {
            match way {
                Way::Gather => {
                    inter::gather(&call, sbuf, scount, sdt, rbuf, rcount, v, rdt, root, req)
                }
                Way::Scatter => {
                    inter::scatter(&call, sbuf, scount, v, sdt, rbuf, rcount, rdt, root, req)
                }
            }
        };
    }
    let call = Call::new(comm, what)?;
    let req = req.map(|r| call.request_ptr(r)).transpose()?.flatten();
    let root = call.root(root)?;
    let at_root = call.me() == root;
    let send = Buffer {
        ptr: sbuf.cast(),
        count: scount,
        dt: sdt,
        count_name: "sendcount",
        type_name: "sendtype",
    };
    let recv = Buffer {
        ptr: rbuf.cast_const().cast(),
        count: rcount,
        dt: rdt,
        count_name: "recvcount",
        type_name: "recvtype",
    };
    let (all, own, counts_name) = match way {
        Way::Gather => (recv, send, "recvcounts"),
        Way::Scatter => (send, recv, "sendcounts"),
    };
    let (all_arg, own_arg);
    if at_root {
        let d = call.dt(all.dt, all.type_name)?;
        let n = if v.is_none() {
            call.count(all.count, all.count_name)?
        } else {
            0
        };
        all_arg = Arg::new(all.ptr, n, &d);
        own_arg = if is_in_place(own.ptr.cast()) {
            Arg::new(IN_PLACE, 0, &d)
        } else {
            Arg::new(
                own.ptr,
                call.count(own.count, own.count_name)?,
                &call.dt(own.dt, own.type_name)?,
            )
        };
    } else {
        let d = call.dt(own.dt, own.type_name)?;
        own_arg = Arg::new(own.ptr, call.count(own.count, own.count_name)?, &d);
        all_arg = Arg::new(std::ptr::null(), 0, &d);
    }
    let vc = match v {
        Some((c, d)) if at_root => {
            // SAFETY: the caller's contract: p counts and displacements at the root.
            Some(unsafe { (call.counts(c, counts_name)?, call.displs(d, "displs")?) })
        }
        _ => None,
    };
    let (send, recv) = match way {
        Way::Gather => (&own_arg, &all_arg),
        Way::Scatter => (&all_arg, &own_arg),
    };
    if req.is_none() && v.is_none() {
        // SAFETY: the caller's contract.
        let r = unsafe {
            match way {
                Way::Gather => world::gather(&call.c, send, recv, root),
                Way::Scatter => world::scatter(&call.c, send, recv, root),
            }
        };
        if let Some(r) = r {
            return r.map_err(|(e, m)| call.err(e, m));
        }
    }
    let vref = vc.as_ref().map(|(c, d)| (&c[..], &d[..]));
    let vref = if v.is_some() && vref.is_none() {
        Some((&[][..], &[][..]))
    } else {
        vref
    };
    // SAFETY: the caller's contract.
    let sched = unsafe {
        match way {
            Way::Gather => plan::gather(&call.env(), send, recv, vref, root),
            Way::Scatter => plan::scatter(&call.env(), send, vref, recv, root),
        }
    };
    call.finish(sched, req)
}

/// Allgather and allgatherv.
///
/// # Safety
/// The C call's contract.
#[allow(clippy::too_many_arguments)]
unsafe fn allgather(
    sbuf: *const c_void,
    scount: c_int,
    sdt: Raw,
    rbuf: *mut c_void,
    rcount: c_int,
    v: Option<(*const c_int, *const c_int)>,
    rdt: Raw,
    comm: Raw,
    req: Option<*mut Raw>,
    what: &'static str,
) -> R<()> {
    if let Some(call) = inter::call(comm, what) {
        // SAFETY: the caller's contract.
        return unsafe { inter::allgather(&call, sbuf, scount, sdt, rbuf, rcount, v, rdt, req) };
    }
    let call = Call::new(comm, what)?;
    let req = req.map(|r| call.request_ptr(r)).transpose()?.flatten();
    let rd = call.dt(rdt, "recvtype")?;
    let send = if is_in_place(sbuf) {
        Arg::new(IN_PLACE, 0, &rd)
    } else {
        Arg::new(
            sbuf.cast(),
            call.count(scount, "sendcount")?,
            &call.dt(sdt, "sendtype")?,
        )
    };
    let rn = if v.is_none() {
        call.count(rcount, "recvcount")?
    } else {
        0
    };
    let recv = Arg::new(rbuf.cast(), rn, &rd);
    let vc = match v {
        // SAFETY: the caller's contract: p counts and displacements.
        Some((c, d)) => Some(unsafe { (call.counts(c, "recvcounts")?, call.displs(d, "displs")?) }),
        None => None,
    };
    if req.is_none() && v.is_none() {
        // SAFETY: the caller's contract.
        if let Some(r) = unsafe { world::allgather(&call.c, &send, &recv) } {
            return r.map_err(|(e, m)| call.err(e, m));
        }
    }
    let vref = vc.as_ref().map(|(c, d)| (&c[..], &d[..]));
    // SAFETY: the caller's contract.
    call.finish(
        unsafe { plan::allgather(&call.env(), &send, &recv, vref) },
        req,
    )
}

/// How an alltoall's blocks are given.
enum A2a {
    /// alltoall: one count and type, blocks one after another.
    Same(c_int, Raw),
    /// alltoallv: counts, displacements in extents, one type.
    V(*const c_int, *const c_int, Raw),
    /// alltoallw: counts, displacements in bytes, a type each.
    W(*const c_int, *const c_int, *const Raw),
}

/// One side's blocks: counts, byte displacements, types.
type Side = (Vec<usize>, Vec<isize>, Vec<Arc<Datatype>>);

impl Call {
    /// One side's blocks: counts, byte displacements, types.
    ///
    /// # Safety
    /// The C call's contract for the arrays.
    unsafe fn a2a(&self, a: &A2a, side: &str) -> R<Side> {
        let p = self.p() as usize;
        match *a {
            A2a::Same(n, t) => {
                let d = self.dt(t, &format!("{side}type"))?;
                let n = self.count(n, &format!("{side}count"))?;
                let ext = d.extent();
                Ok((
                    vec![n; p],
                    (0..p).map(|i| (i * n) as isize * ext).collect(),
                    vec![d; p],
                ))
            }
            A2a::V(c, dp, t) => {
                let d = self.dt(t, &format!("{side}type"))?;
                // SAFETY: the caller's contract: p counts and displacements.
                let (c, dp) = unsafe {
                    (
                        self.counts(c, &format!("{side}counts"))?,
                        self.displs(dp, &format!("{side}displs"))?,
                    )
                };
                let ext = d.extent();
                Ok((c, dp.iter().map(|&x| x * ext).collect(), vec![d; p]))
            }
            A2a::W(c, dp, t) => {
                if t.is_null() {
                    return Err(self.err(MPI_ERR_ARG, format_args!("{side}types is NULL")));
                }
                // SAFETY: the caller's contract: p counts, displacements and types.
                let (c, dp, ts) = unsafe {
                    (
                        self.counts(c, &format!("{side}counts"))?,
                        self.displs(dp, &format!("{side}displs"))?,
                        std::slice::from_raw_parts(t, p),
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
}

/// Alltoall, alltoallv and alltoallw.
///
/// # Safety
/// The C call's contract.
unsafe fn alltoall(
    sbuf: *const c_void,
    s: A2a,
    rbuf: *mut c_void,
    r: A2a,
    comm: Raw,
    req: Option<*mut Raw>,
    what: &'static str,
) -> R<()> {
    if let Some(call) = inter::call(comm, what) {
        // SAFETY: the caller's contract.
        return unsafe { inter::alltoall(&call, sbuf, &s, rbuf, &r, req) };
    }
    let call = Call::new(comm, what)?;
    let req = req.map(|r| call.request_ptr(r)).transpose()?.flatten();
    let inplace = is_in_place(sbuf);
    // SAFETY: the caller's contract.
    let (rc, rd, rt) = unsafe { call.a2a(&r, "recv")? };
    let (sc, sd, st) = if inplace {
        (rc.clone(), rd.clone(), rt.clone())
    } else {
        // SAFETY: the caller's contract.
        unsafe { call.a2a(&s, "send")? }
    };
    if req.is_none() && matches!(r, A2a::Same(..)) {
        let (sa, ra) = (
            Arg::new(sbuf.cast(), sc[0], &st[0]),
            Arg::new(rbuf.cast(), rc[0], &rt[0]),
        );
        if call.p() > 0 {
            // SAFETY: the caller's contract.
            if let Some(res) = unsafe { world::alltoall(&call.c, &sa, &ra) } {
                return res.map_err(|(e, m)| call.err(e, m));
            }
        }
    }
    let send = Blocks {
        ptr: if inplace { IN_PLACE } else { sbuf.cast() },
        counts: &sc,
        displs: &sd,
        types: &st,
    };
    let recv = Blocks {
        ptr: rbuf.cast(),
        counts: &rc,
        displs: &rd,
        types: &rt,
    };
    // SAFETY: the caller's contract.
    call.finish(unsafe { plan::alltoall(&call.env(), &send, &recv) }, req)
}

/// Which reduction.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Red {
    Reduce(c_int),
    All,
    Scan,
    Exscan,
}

/// Reduce, allreduce, scan and exscan.
///
/// # Safety
/// The C call's contract.
#[allow(clippy::too_many_arguments)]
unsafe fn reduce(
    sbuf: *const c_void,
    rbuf: *mut c_void,
    count: c_int,
    dt: Raw,
    oh: Raw,
    kind: Red,
    comm: Raw,
    req: Option<*mut Raw>,
    what: &'static str,
) -> R<()> {
    if let (Some(call), Red::Reduce(_) | Red::All) = (inter::call(comm, what), kind) {
        let root = match kind {
            Red::Reduce(r) => Some(r),
            _ => None,
        };
        // SAFETY: the caller's contract.
        return unsafe { inter::reduce(&call, sbuf, rbuf, count, dt, oh, root, req) };
    }
    let call = Call::new(comm, what)?;
    let req = req.map(|r| call.request_ptr(r)).transpose()?.flatten();
    let n = call.count(count, "count")?;
    let d = call.dt_ref(dt, "datatype")?;
    let o = call.op(oh)?;
    call.reduction_ok(&o, oh, &d, dt)?;
    let root = match kind {
        Red::Reduce(r) => Some(call.root(r)?),
        _ => None,
    };
    if let Some(r) = root
        && is_in_place(sbuf)
        && call.me() != r
    {
        return Err(call.err(MPI_ERR_BUFFER, "MPI_IN_PLACE is for the root only"));
    }
    let (s, r) = (sbuf.cast::<u8>(), rbuf.cast::<u8>());
    if req.is_none() && matches!(kind, Red::Reduce(_) | Red::All) {
        // SAFETY: the caller's contract.
        if let Some(res) = unsafe { world::reduce(&call.c, s, r, n, &d, &o, root) } {
            return res.map_err(|(e, m)| call.err(e, m));
        }
    }
    let e = call.env();
    let red = call.reduction(&o, oh, &d.arc(), dt)?;
    // SAFETY: the caller's contract.
    let s = unsafe {
        match kind {
            Red::Reduce(_) | Red::All => plan::reduce(&e, s, r, n, red, root),
            Red::Scan => plan::scan(&e, s, r, n, red, false),
            Red::Exscan => plan::scan(&e, s, r, n, red, true),
        }
    };
    call.finish(s, req)
}

/// Reduce_scatter (`counts`) and reduce_scatter_block (`block`).
///
/// # Safety
/// The C call's contract.
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_scatter(
    sbuf: *const c_void,
    rbuf: *mut c_void,
    counts: Result<*const c_int, c_int>,
    dt: Raw,
    oh: Raw,
    comm: Raw,
    req: Option<*mut Raw>,
    what: &'static str,
) -> R<()> {
    if let Some(call) = inter::call(comm, what) {
        // SAFETY: the caller's contract.
        return unsafe { inter::reduce_scatter(&call, sbuf, rbuf, counts, dt, oh, req) };
    }
    let call = Call::new(comm, what)?;
    let req = req.map(|r| call.request_ptr(r)).transpose()?.flatten();
    let counts = match counts {
        // SAFETY: the caller's contract: p counts.
        Ok(c) => unsafe { call.counts(c, "recvcounts")? },
        Err(n) => vec![call.count(n, "recvcount")?; call.p() as usize],
    };
    let d = call.dt(dt, "datatype")?;
    let o = call.op(oh)?;
    let red = call.reduction(&o, oh, &d, dt)?;
    // SAFETY: the caller's contract.
    let s = unsafe { plan::reduce_scatter(&call.env(), sbuf.cast(), rbuf.cast(), &counts, red) };
    call.finish(s, req)
}

// ---- C entry points ------------------------------------------------------------------------

macro_rules! entry {
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The MPI standard's contract for the call's pointers.
        #[unsafe(export_name = concat!("P", stringify!($name)))]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            #[allow(unused_unsafe)]
            // SAFETY: the C caller's contract, forwarded.
            code(unsafe { $body })
        }
    };
}

entry!(
    /// `MPI_Barrier`.
    fn MPI_Barrier(comm: Raw) {
        barrier(comm, None, "MPI_Barrier")
    }
);
entry!(
    /// `MPI_Ibarrier`.
    fn MPI_Ibarrier(comm: Raw, req: *mut Raw) {
        barrier(comm, Some(req), "MPI_Ibarrier")
    }
);
entry!(
    /// `MPI_Bcast`.
    fn MPI_Bcast(buf: *mut c_void, count: c_int, dt: Raw, root: c_int, comm: Raw) {
        bcast(buf, count, dt, root, comm, None, "MPI_Bcast")
    }
);
entry!(
    /// `MPI_Ibcast`.
    fn MPI_Ibcast(buf: *mut c_void, count: c_int, dt: Raw, root: c_int, comm: Raw, req: *mut Raw) {
        bcast(buf, count, dt, root, comm, Some(req), "MPI_Ibcast")
    }
);
/// The entry points of gather, scatter and their v-forms, each blocking and non-blocking
/// (the same arguments and the request last). Each shape gives its arguments before
/// `root` and what `rooted` gets of them.
macro_rules! rooted_fns {
    ($($blocking:ident $nonblocking:ident: $shape:ident),* $(,)?) => {$(
        rooted_fns!(@$shape $blocking None,);
        rooted_fns!(@$shape $nonblocking Some(req), req: *mut Raw);
    )*};
    (@gather $($rest:tt)*) => {
        rooted_fns!(@fn
            (sbuf: *const c_void, scount: c_int, sdt: Raw, rbuf: *mut c_void, rcount: c_int, rdt: Raw)
            [Way::Gather, sbuf, scount, sdt, rbuf, rcount, rdt, None]
            $($rest)*);
    };
    (@scatter $($rest:tt)*) => {
        rooted_fns!(@fn
            (sbuf: *const c_void, scount: c_int, sdt: Raw, rbuf: *mut c_void, rcount: c_int, rdt: Raw)
            [Way::Scatter, sbuf, scount, sdt, rbuf, rcount, rdt, None]
            $($rest)*);
    };
    (@gatherv $($rest:tt)*) => {
        rooted_fns!(@fn
            (
                sbuf: *const c_void, scount: c_int, sdt: Raw,
                rbuf: *mut c_void, rcounts: *const c_int, displs: *const c_int, rdt: Raw
            )
            [Way::Gather, sbuf, scount, sdt, rbuf, 0, rdt, Some((rcounts, displs))]
            $($rest)*);
    };
    (@scatterv $($rest:tt)*) => {
        rooted_fns!(@fn
            (
                sbuf: *const c_void, scounts: *const c_int, displs: *const c_int, sdt: Raw,
                rbuf: *mut c_void, rcount: c_int, rdt: Raw
            )
            [Way::Scatter, sbuf, 0, sdt, rbuf, rcount, rdt, Some((scounts, displs))]
            $($rest)*);
    };
    (@fn ($($a:ident: $t:ty),*) [$($arg:expr),*] $name:ident $req:expr, $($extra:ident: $et:ty)?) => {
        entry!(
            #[doc = concat!("`", stringify!($name), "`.")]
            fn $name($($a: $t,)* root: c_int, comm: Raw, $($extra: $et)?) {
                rooted($($arg,)* root, comm, $req, stringify!($name))
            }
        );
    };
}

rooted_fns!(
    MPI_Gather MPI_Igather: gather,
    MPI_Gatherv MPI_Igatherv: gatherv,
    MPI_Scatter MPI_Iscatter: scatter,
    MPI_Scatterv MPI_Iscatterv: scatterv,
);
entry!(
    /// `MPI_Allgather`.
    fn MPI_Allgather(
        sbuf: *const c_void,
        scount: c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcount: c_int,
        rdt: Raw,
        comm: Raw,
    ) {
        allgather(
            sbuf,
            scount,
            sdt,
            rbuf,
            rcount,
            None,
            rdt,
            comm,
            None,
            "MPI_Allgather",
        )
    }
);
entry!(
    /// `MPI_Iallgather`.
    fn MPI_Iallgather(
        sbuf: *const c_void,
        scount: c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcount: c_int,
        rdt: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        allgather(
            sbuf,
            scount,
            sdt,
            rbuf,
            rcount,
            None,
            rdt,
            comm,
            Some(req),
            "MPI_Iallgather",
        )
    }
);
entry!(
    /// `MPI_Allgatherv`.
    fn MPI_Allgatherv(
        sbuf: *const c_void,
        scount: c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        displs: *const c_int,
        rdt: Raw,
        comm: Raw,
    ) {
        allgather(
            sbuf,
            scount,
            sdt,
            rbuf,
            0,
            Some((rcounts, displs)),
            rdt,
            comm,
            None,
            "MPI_Allgatherv",
        )
    }
);
entry!(
    /// `MPI_Iallgatherv`.
    fn MPI_Iallgatherv(
        sbuf: *const c_void,
        scount: c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        displs: *const c_int,
        rdt: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        allgather(
            sbuf,
            scount,
            sdt,
            rbuf,
            0,
            Some((rcounts, displs)),
            rdt,
            comm,
            Some(req),
            "MPI_Iallgatherv",
        )
    }
);
entry!(
    /// `MPI_Alltoall`.
    fn MPI_Alltoall(
        sbuf: *const c_void,
        scount: c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcount: c_int,
        rdt: Raw,
        comm: Raw,
    ) {
        alltoall(
            sbuf,
            A2a::Same(scount, sdt),
            rbuf,
            A2a::Same(rcount, rdt),
            comm,
            None,
            "MPI_Alltoall",
        )
    }
);
entry!(
    /// `MPI_Ialltoall`.
    fn MPI_Ialltoall(
        sbuf: *const c_void,
        scount: c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcount: c_int,
        rdt: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        alltoall(
            sbuf,
            A2a::Same(scount, sdt),
            rbuf,
            A2a::Same(rcount, rdt),
            comm,
            Some(req),
            "MPI_Ialltoall",
        )
    }
);
entry!(
    /// `MPI_Alltoallv`.
    fn MPI_Alltoallv(
        sbuf: *const c_void,
        scounts: *const c_int,
        sdispls: *const c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        rdispls: *const c_int,
        rdt: Raw,
        comm: Raw,
    ) {
        alltoall(
            sbuf,
            A2a::V(scounts, sdispls, sdt),
            rbuf,
            A2a::V(rcounts, rdispls, rdt),
            comm,
            None,
            "MPI_Alltoallv",
        )
    }
);
entry!(
    /// `MPI_Ialltoallv`.
    fn MPI_Ialltoallv(
        sbuf: *const c_void,
        scounts: *const c_int,
        sdispls: *const c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        rdispls: *const c_int,
        rdt: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        alltoall(
            sbuf,
            A2a::V(scounts, sdispls, sdt),
            rbuf,
            A2a::V(rcounts, rdispls, rdt),
            comm,
            Some(req),
            "MPI_Ialltoallv",
        )
    }
);
entry!(
    /// `MPI_Alltoallw`.
    fn MPI_Alltoallw(
        sbuf: *const c_void,
        scounts: *const c_int,
        sdispls: *const c_int,
        sdts: *const Raw,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        rdispls: *const c_int,
        rdts: *const Raw,
        comm: Raw,
    ) {
        alltoall(
            sbuf,
            A2a::W(scounts, sdispls, sdts),
            rbuf,
            A2a::W(rcounts, rdispls, rdts),
            comm,
            None,
            "MPI_Alltoallw",
        )
    }
);
entry!(
    /// `MPI_Ialltoallw`.
    fn MPI_Ialltoallw(
        sbuf: *const c_void,
        scounts: *const c_int,
        sdispls: *const c_int,
        sdts: *const Raw,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        rdispls: *const c_int,
        rdts: *const Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        alltoall(
            sbuf,
            A2a::W(scounts, sdispls, sdts),
            rbuf,
            A2a::W(rcounts, rdispls, rdts),
            comm,
            Some(req),
            "MPI_Ialltoallw",
        )
    }
);
entry!(
    /// `MPI_Reduce`.
    fn MPI_Reduce(
        sbuf: *const c_void,
        rbuf: *mut c_void,
        count: c_int,
        dt: Raw,
        op: Raw,
        root: c_int,
        comm: Raw,
    ) {
        reduce(
            sbuf,
            rbuf,
            count,
            dt,
            op,
            Red::Reduce(root),
            comm,
            None,
            "MPI_Reduce",
        )
    }
);
entry!(
    /// `MPI_Ireduce`.
    fn MPI_Ireduce(
        sbuf: *const c_void,
        rbuf: *mut c_void,
        count: c_int,
        dt: Raw,
        op: Raw,
        root: c_int,
        comm: Raw,
        req: *mut Raw,
    ) {
        reduce(
            sbuf,
            rbuf,
            count,
            dt,
            op,
            Red::Reduce(root),
            comm,
            Some(req),
            "MPI_Ireduce",
        )
    }
);
entry!(
    /// `MPI_Allreduce`.
    fn MPI_Allreduce(
        sbuf: *const c_void,
        rbuf: *mut c_void,
        count: c_int,
        dt: Raw,
        op: Raw,
        comm: Raw,
    ) {
        reduce(
            sbuf,
            rbuf,
            count,
            dt,
            op,
            Red::All,
            comm,
            None,
            "MPI_Allreduce",
        )
    }
);
entry!(
    /// `MPI_Iallreduce`.
    fn MPI_Iallreduce(
        sbuf: *const c_void,
        rbuf: *mut c_void,
        count: c_int,
        dt: Raw,
        op: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        reduce(
            sbuf,
            rbuf,
            count,
            dt,
            op,
            Red::All,
            comm,
            Some(req),
            "MPI_Iallreduce",
        )
    }
);
entry!(
    /// `MPI_Scan`.
    fn MPI_Scan(sbuf: *const c_void, rbuf: *mut c_void, count: c_int, dt: Raw, op: Raw, comm: Raw) {
        reduce(sbuf, rbuf, count, dt, op, Red::Scan, comm, None, "MPI_Scan")
    }
);
entry!(
    /// `MPI_Iscan`.
    fn MPI_Iscan(
        sbuf: *const c_void,
        rbuf: *mut c_void,
        count: c_int,
        dt: Raw,
        op: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        reduce(
            sbuf,
            rbuf,
            count,
            dt,
            op,
            Red::Scan,
            comm,
            Some(req),
            "MPI_Iscan",
        )
    }
);
entry!(
    /// `MPI_Exscan`.
    fn MPI_Exscan(
        sbuf: *const c_void,
        rbuf: *mut c_void,
        count: c_int,
        dt: Raw,
        op: Raw,
        comm: Raw,
    ) {
        reduce(
            sbuf,
            rbuf,
            count,
            dt,
            op,
            Red::Exscan,
            comm,
            None,
            "MPI_Exscan",
        )
    }
);
entry!(
    /// `MPI_Iexscan`.
    fn MPI_Iexscan(
        sbuf: *const c_void,
        rbuf: *mut c_void,
        count: c_int,
        dt: Raw,
        op: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        reduce(
            sbuf,
            rbuf,
            count,
            dt,
            op,
            Red::Exscan,
            comm,
            Some(req),
            "MPI_Iexscan",
        )
    }
);
entry!(
    /// `MPI_Reduce_scatter`.
    fn MPI_Reduce_scatter(
        sbuf: *const c_void,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        dt: Raw,
        op: Raw,
        comm: Raw,
    ) {
        reduce_scatter(
            sbuf,
            rbuf,
            Ok(rcounts),
            dt,
            op,
            comm,
            None,
            "MPI_Reduce_scatter",
        )
    }
);
entry!(
    /// `MPI_Ireduce_scatter`.
    fn MPI_Ireduce_scatter(
        sbuf: *const c_void,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        dt: Raw,
        op: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        reduce_scatter(
            sbuf,
            rbuf,
            Ok(rcounts),
            dt,
            op,
            comm,
            Some(req),
            "MPI_Ireduce_scatter",
        )
    }
);
entry!(
    /// `MPI_Reduce_scatter_block`.
    fn MPI_Reduce_scatter_block(
        sbuf: *const c_void,
        rbuf: *mut c_void,
        rcount: c_int,
        dt: Raw,
        op: Raw,
        comm: Raw,
    ) {
        reduce_scatter(
            sbuf,
            rbuf,
            Err(rcount),
            dt,
            op,
            comm,
            None,
            "MPI_Reduce_scatter_block",
        )
    }
);
entry!(
    /// `MPI_Ireduce_scatter_block`.
    fn MPI_Ireduce_scatter_block(
        sbuf: *const c_void,
        rbuf: *mut c_void,
        rcount: c_int,
        dt: Raw,
        op: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        reduce_scatter(
            sbuf,
            rbuf,
            Err(rcount),
            dt,
            op,
            comm,
            Some(req),
            "MPI_Ireduce_scatter_block",
        )
    }
);

// ---- neighborhood collectives ----------------------------------------------------------

/// One side of a neighborhood collective, as C passes it.
enum Nb {
    /// One count and type, blocks one after another (allgather's and alltoall's).
    Same(c_int, Raw),
    /// Counts and displacements in extents, one type (the v-variants).
    V(*const c_int, *const c_int, Raw),
    /// Counts, byte displacements (`MPI_Aint`), a type each (alltoallw).
    W(*const c_int, *const isize, *const Raw),
}

impl Call {
    fn neighbors(&self) -> R<plan::Neighbors> {
        match &self.c.topo {
            Some(crate::topo::Topo::Cart { dims, periods }) => {
                Ok(plan::Neighbors::cart(dims, periods, self.me()))
            }
            Some(crate::topo::Topo::Graph { index, edges }) => {
                Ok(plan::Neighbors::graph(index, edges, self.me()))
            }
            Some(crate::topo::Topo::DistGraph { sources, dests, .. }) => {
                Ok(plan::Neighbors::dist_graph(sources, dests))
            }
            None => Err(self.err(MPI_ERR_TOPOLOGY, "the communicator has no topology")),
        }
    }

    /// `n` ints from a C array.
    ///
    /// # Safety
    /// `a` holds `n` ints (checked for NULL when n > 0).
    unsafe fn ints(&self, a: *const c_int, n: usize, name: &str) -> R<Vec<c_int>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        if a.is_null() {
            return Err(self.err(MPI_ERR_ARG, format_args!("{name} is NULL")));
        }
        // SAFETY: the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts(a, n) }.to_vec())
    }

    /// One side's `n` blocks: counts, byte displacements, types.
    ///
    /// # Safety
    /// The C call's contract for the arrays.
    unsafe fn nb_side(&self, a: &Nb, n: usize, side: &str) -> R<Side> {
        match *a {
            Nb::Same(c, t) => {
                let d = self.dt(t, &format!("{side}type"))?;
                let c = self.count(c, &format!("{side}count"))?;
                let ext = d.extent();
                Ok((
                    vec![c; n],
                    (0..n).map(|i| (i * c) as isize * ext).collect(),
                    vec![d; n],
                ))
            }
            Nb::V(c, dp, t) => {
                let d = self.dt(t, &format!("{side}type"))?;
                // SAFETY: the caller's contract: n counts and displacements.
                let (c, dp) = unsafe {
                    (
                        self.ints(c, n, &format!("{side}counts"))?,
                        self.ints(dp, n, &format!("{side}displs"))?,
                    )
                };
                let c = c
                    .iter()
                    .map(|&x| self.count(x, &format!("{side}counts[]")))
                    .collect::<R<Vec<_>>>()?;
                let ext = d.extent();
                Ok((
                    c,
                    dp.iter().map(|&x| x as isize * ext).collect(),
                    vec![d; n],
                ))
            }
            Nb::W(c, dp, t) => {
                if n > 0 && (dp.is_null() || t.is_null()) {
                    return Err(self.err(
                        MPI_ERR_ARG,
                        format_args!("{side}displs or {side}types is NULL"),
                    ));
                }
                // SAFETY: the caller's contract: n counts, displacements and types.
                let (c, dp, ts) = unsafe {
                    (
                        self.ints(c, n, &format!("{side}counts"))?,
                        if n == 0 {
                            Vec::new()
                        } else {
                            std::slice::from_raw_parts(dp, n).to_vec()
                        },
                        if n == 0 {
                            &[][..]
                        } else {
                            std::slice::from_raw_parts(t, n)
                        },
                    )
                };
                let c = c
                    .iter()
                    .map(|&x| self.count(x, &format!("{side}counts[]")))
                    .collect::<R<Vec<_>>>()?;
                let ts = ts
                    .iter()
                    .enumerate()
                    .map(|(i, &h)| self.dt(h, &format!("{side}types[{i}]")))
                    .collect::<R<Vec<_>>>()?;
                Ok((c, dp, ts))
            }
        }
    }
}

/// Every neighborhood collective: `allgather` sends the one block to every neighbor.
///
/// # Safety
/// The C call's contract.
#[allow(clippy::too_many_arguments)]
unsafe fn neighbor(
    sbuf: *const c_void,
    s: Nb,
    rbuf: *mut c_void,
    r: Nb,
    allgather: bool,
    comm: Raw,
    req: Option<*mut Raw>,
    what: &'static str,
) -> R<()> {
    let call = Call::new(comm, what)?;
    let req = req.map(|r| call.request_ptr(r)).transpose()?.flatten();
    let nb = call.neighbors()?;
    // SAFETY: the caller's contract.
    let (rc, rd, rt) = unsafe { call.nb_side(&r, nb.sources.len(), "recv")? };
    let sn = if allgather { 1 } else { nb.dests.len() };
    // SAFETY: the caller's contract.
    let (sc, sd, st) = unsafe { call.nb_side(&s, sn, "send")? };
    let send = Blocks {
        ptr: sbuf.cast(),
        counts: &sc,
        displs: &sd,
        types: &st,
    };
    let recv = Blocks {
        ptr: rbuf.cast(),
        counts: &rc,
        displs: &rd,
        types: &rt,
    };
    // SAFETY: the caller's contract.
    let sched = unsafe { plan::neighbor(&call.env(), &nb, &send, &recv, allgather) };
    call.finish(sched, req)
}

entry!(
    /// `MPI_Neighbor_allgather`.
    fn MPI_Neighbor_allgather(
        sbuf: *const c_void,
        scount: c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcount: c_int,
        rdt: Raw,
        comm: Raw,
    ) {
        neighbor(
            sbuf,
            Nb::Same(scount, sdt),
            rbuf,
            Nb::Same(rcount, rdt),
            true,
            comm,
            None,
            "MPI_Neighbor_allgather",
        )
    }
);
entry!(
    /// `MPI_Ineighbor_allgather`.
    fn MPI_Ineighbor_allgather(
        sbuf: *const c_void,
        scount: c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcount: c_int,
        rdt: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        neighbor(
            sbuf,
            Nb::Same(scount, sdt),
            rbuf,
            Nb::Same(rcount, rdt),
            true,
            comm,
            Some(req),
            "MPI_Ineighbor_allgather",
        )
    }
);
entry!(
    /// `MPI_Neighbor_allgatherv`.
    fn MPI_Neighbor_allgatherv(
        sbuf: *const c_void,
        scount: c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        displs: *const c_int,
        rdt: Raw,
        comm: Raw,
    ) {
        neighbor(
            sbuf,
            Nb::Same(scount, sdt),
            rbuf,
            Nb::V(rcounts, displs, rdt),
            true,
            comm,
            None,
            "MPI_Neighbor_allgatherv",
        )
    }
);
entry!(
    /// `MPI_Ineighbor_allgatherv`.
    fn MPI_Ineighbor_allgatherv(
        sbuf: *const c_void,
        scount: c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        displs: *const c_int,
        rdt: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        neighbor(
            sbuf,
            Nb::Same(scount, sdt),
            rbuf,
            Nb::V(rcounts, displs, rdt),
            true,
            comm,
            Some(req),
            "MPI_Ineighbor_allgatherv",
        )
    }
);
entry!(
    /// `MPI_Neighbor_alltoall`.
    fn MPI_Neighbor_alltoall(
        sbuf: *const c_void,
        scount: c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcount: c_int,
        rdt: Raw,
        comm: Raw,
    ) {
        neighbor(
            sbuf,
            Nb::Same(scount, sdt),
            rbuf,
            Nb::Same(rcount, rdt),
            false,
            comm,
            None,
            "MPI_Neighbor_alltoall",
        )
    }
);
entry!(
    /// `MPI_Ineighbor_alltoall`.
    fn MPI_Ineighbor_alltoall(
        sbuf: *const c_void,
        scount: c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcount: c_int,
        rdt: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        neighbor(
            sbuf,
            Nb::Same(scount, sdt),
            rbuf,
            Nb::Same(rcount, rdt),
            false,
            comm,
            Some(req),
            "MPI_Ineighbor_alltoall",
        )
    }
);
entry!(
    /// `MPI_Neighbor_alltoallv`.
    fn MPI_Neighbor_alltoallv(
        sbuf: *const c_void,
        scounts: *const c_int,
        sdispls: *const c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        rdispls: *const c_int,
        rdt: Raw,
        comm: Raw,
    ) {
        neighbor(
            sbuf,
            Nb::V(scounts, sdispls, sdt),
            rbuf,
            Nb::V(rcounts, rdispls, rdt),
            false,
            comm,
            None,
            "MPI_Neighbor_alltoallv",
        )
    }
);
entry!(
    /// `MPI_Ineighbor_alltoallv`.
    fn MPI_Ineighbor_alltoallv(
        sbuf: *const c_void,
        scounts: *const c_int,
        sdispls: *const c_int,
        sdt: Raw,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        rdispls: *const c_int,
        rdt: Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        neighbor(
            sbuf,
            Nb::V(scounts, sdispls, sdt),
            rbuf,
            Nb::V(rcounts, rdispls, rdt),
            false,
            comm,
            Some(req),
            "MPI_Ineighbor_alltoallv",
        )
    }
);
entry!(
    /// `MPI_Neighbor_alltoallw`.
    fn MPI_Neighbor_alltoallw(
        sbuf: *const c_void,
        scounts: *const c_int,
        sdispls: *const isize,
        sdts: *const Raw,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        rdispls: *const isize,
        rdts: *const Raw,
        comm: Raw,
    ) {
        neighbor(
            sbuf,
            Nb::W(scounts, sdispls, sdts),
            rbuf,
            Nb::W(rcounts, rdispls, rdts),
            false,
            comm,
            None,
            "MPI_Neighbor_alltoallw",
        )
    }
);
entry!(
    /// `MPI_Ineighbor_alltoallw`.
    fn MPI_Ineighbor_alltoallw(
        sbuf: *const c_void,
        scounts: *const c_int,
        sdispls: *const isize,
        sdts: *const Raw,
        rbuf: *mut c_void,
        rcounts: *const c_int,
        rdispls: *const isize,
        rdts: *const Raw,
        comm: Raw,
        req: *mut Raw,
    ) {
        neighbor(
            sbuf,
            Nb::W(scounts, sdispls, sdts),
            rbuf,
            Nb::W(rcounts, rdispls, rdts),
            false,
            comm,
            Some(req),
            "MPI_Ineighbor_alltoallw",
        )
    }
);
