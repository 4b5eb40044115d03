//! Blocking collectives on world-like communicators through `bulkwire_collectives::Coll`
//! over the job's p2p communicator: one instance, made on the first such call with
//! `runtime::coll_config()` (collectively: every process makes its first call on a
//! world-like communicator at the same point of the program, as MPI's ordering rules
//! require). It brings the network cache of one host.
//!
//! Which calls take this path must not depend on anything that may differ between
//! processes: movement collectives take it on every world-like communicator (data of a
//! type with gaps is packed first), reductions when the operation and type, which MPI
//! requires to be the same everywhere, are ones `Coll` computes (`Op::for_collectives`).
//! Each function returns `None` when the call is not for this path, else its outcome
//! (an error code and what went wrong).
//!
//! Calls from several threads on different world-like communicators at once would share
//! the one instance's sequence; MPI programs that do that get the schedules' path by
//! duplicating a communicator that is not world-like.

use std::borrow::Cow;
use std::os::raw::{c_char, c_int};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use bulkwire_collectives::{Algorithm, Coll, Error as CErr};

use super::plan::Arg;
use crate::comm::Communicator;
use crate::datatype::Datatype;
use crate::error::*;
use crate::op::Op;
use crate::runtime;

type Res = Result<(), (c_int, String)>;

static WORLD: OnceLock<Option<Coll<'static>>> = OnceLock::new();
static CALLS: AtomicU64 = AtomicU64::new(0);

fn coll(c: &Communicator) -> Option<&'static Coll<'static>> {
    if !c.world_like {
        return None;
    }
    let comm = runtime::p2p().ok()?;
    // A failure to make it fails alike on every process (the configuration check and the
    // network cache's set-up agree collectively), so all fall back to the schedules.
    WORLD
        .get_or_init(|| Coll::new(comm, runtime::coll_config().clone()).ok())
        .as_ref()
}

/// Calls made through `Coll`, and the algorithm of the last (for tests and reports).
pub fn stats() -> (u64, Option<Algorithm>) {
    (
        CALLS.load(Ordering::Relaxed),
        WORLD
            .get()
            .and_then(|c| c.as_ref())
            .map(|c| c.last_algorithm()),
    )
}

/// `bwmpi_coll_world_stats`: the number of blocking collectives that went through the
/// collectives layer's `Coll` (with the network cache on one host), and the name of the
/// last one's algorithm written to `name` (at most `len` bytes with the NUL). A bulkwire
/// extension for tests and benchmarks; not in `mpi.h`.
///
/// # Safety
/// `name` must be NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bwmpi_coll_world_stats(name: *mut c_char, len: c_int) -> i64 {
    let (n, a) = stats();
    if !name.is_null() && len > 0 {
        let s = a.map_or_else(|| "none".to_string(), |a| format!("{a:?}"));
        let k = s.len().min(len as usize - 1);
        // SAFETY: the caller's contract: `len` bytes at `name`; k + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), name.cast::<u8>(), k);
            *name.add(k) = 0;
        }
    }
    n as i64
}

fn outcome(r: Result<(), CErr>) -> Res {
    CALLS.fetch_add(1, Ordering::Relaxed);
    r.map_err(|e| {
        let code = match e {
            CErr::Root { .. } => MPI_ERR_ROOT,
            CErr::Arg(_) => MPI_ERR_TRUNCATE,
            _ => MPI_ERR_OTHER,
        };
        (code, e.to_string())
    })
}

/// The packed bytes of `count` elements at `ptr`: the memory itself when contiguous.
///
/// # Safety
/// `ptr` must hold `count` elements of `dt`.
unsafe fn input<'a>(ptr: *const u8, count: usize, dt: &Datatype) -> Cow<'a, [u8]> {
    let len = count * dt.size();
    if len == 0 {
        return Cow::Borrowed(&[]);
    }
    if dt.contiguous() {
        // SAFETY: contiguous: the data is the `len` bytes from true_lb.
        return Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(ptr.wrapping_offset(dt.true_lb()), len)
        });
    }
    let mut v = Vec::with_capacity(len);
    // SAFETY: the caller's contract.
    unsafe { dt.pack(ptr, count, &mut v) };
    Cow::Owned(v)
}

/// Where packed results go: the memory itself when contiguous, else a staging vector
/// unpacked by [`Out::done`].
struct Out<'a> {
    direct: Option<&'a mut [u8]>,
    staged: Vec<u8>,
    ptr: *mut u8,
    count: usize,
    dt: &'a Datatype,
}

impl<'a> Out<'a> {
    /// # Safety
    /// `ptr` must be valid for `count` elements of `dt`; `fill` packs its current contents
    /// (for results that start from the data there).
    unsafe fn new(ptr: *mut u8, count: usize, dt: &'a Datatype, fill: bool) -> Out<'a> {
        let len = count * dt.size();
        if len == 0 || dt.contiguous() {
            let direct = if len == 0 {
                &mut [][..]
            } else {
                // SAFETY: contiguous: the data is the `len` bytes from true_lb.
                unsafe { std::slice::from_raw_parts_mut(ptr.wrapping_offset(dt.true_lb()), len) }
            };
            return Out {
                direct: Some(direct),
                staged: Vec::new(),
                ptr,
                count,
                dt,
            };
        }
        let mut staged = Vec::with_capacity(len);
        if fill {
            // SAFETY: the caller's contract.
            unsafe { dt.pack(ptr, count, &mut staged) };
        } else {
            staged.resize(len, 0);
        }
        Out {
            direct: None,
            staged,
            ptr,
            count,
            dt,
        }
    }

    fn bytes(&mut self) -> &mut [u8] {
        match &mut self.direct {
            Some(d) => d,
            None => &mut self.staged,
        }
    }

    fn done(self) {
        if self.direct.is_none() {
            // SAFETY: `new`'s contract: `ptr` holds `count` elements.
            unsafe { self.dt.unpack(&self.staged, self.ptr, self.count) };
        }
    }
}

pub fn barrier(c: &Communicator) -> Option<Res> {
    let w = coll(c)?;
    Some(outcome(w.barrier()))
}

/// # Safety
/// The C call's contract.
pub unsafe fn bcast(c: &Communicator, a: &Arg, root: u32) -> Option<Res> {
    let w = coll(c)?;
    // SAFETY: the caller's contract.
    let mut o = unsafe { Out::new(a.ptr, a.count, &a.dt, c.rank == root) };
    let r = outcome(w.broadcast(o.bytes(), root));
    if r.is_ok() && c.rank != root {
        o.done();
    }
    Some(r)
}

/// # Safety
/// The C call's contract; `send.ptr` may be `IN_PLACE` at the root.
pub unsafe fn gather(c: &Communicator, send: &Arg, recv: &Arg, root: u32) -> Option<Res> {
    let w = coll(c)?;
    let p = c.size() as usize;
    let at_root = c.rank == root;
    if at_root {
        let n = recv.count;
        // SAFETY: the caller's contract: p blocks of n elements at the root.
        let mut o = unsafe { Out::new(recv.ptr, n * p, &recv.dt, send.in_place()) };
        let mine: Vec<u8> = if send.in_place() {
            let b = n * recv.dt.size();
            o.bytes()[c.rank as usize * b..][..b].to_vec()
        } else {
            // SAFETY: the caller's contract.
            unsafe { input(send.ptr, send.count, &send.dt) }.into_owned()
        };
        let r = outcome(w.gather(&mine, o.bytes(), root));
        if r.is_ok() {
            o.done();
        }
        Some(r)
    } else {
        // SAFETY: the caller's contract.
        let mine = unsafe { input(send.ptr, send.count, &send.dt) };
        Some(outcome(w.gather(&mine, &mut [], root)))
    }
}

/// # Safety
/// The C call's contract; `recv.ptr` may be `IN_PLACE` at the root.
pub unsafe fn scatter(c: &Communicator, send: &Arg, recv: &Arg, root: u32) -> Option<Res> {
    let w = coll(c)?;
    let p = c.size() as usize;
    if c.rank == root {
        // SAFETY: the caller's contract: p blocks at the root.
        let all = unsafe { input(send.ptr, send.count * p, &send.dt) };
        let b = send.count * send.dt.size();
        if recv.in_place() {
            let mut scratch = vec![0u8; b];
            return Some(outcome(w.scatter(&all, &mut scratch, root)));
        }
        // SAFETY: the caller's contract.
        let mut o = unsafe { Out::new(recv.ptr, recv.count, &recv.dt, false) };
        let r = outcome(w.scatter(&all, o.bytes(), root));
        if r.is_ok() {
            o.done();
        }
        Some(r)
    } else {
        // SAFETY: the caller's contract.
        let mut o = unsafe { Out::new(recv.ptr, recv.count, &recv.dt, false) };
        let r = outcome(w.scatter(&[], o.bytes(), root));
        if r.is_ok() {
            o.done();
        }
        Some(r)
    }
}

/// # Safety
/// The C call's contract; `send.ptr` may be `IN_PLACE`.
pub unsafe fn allgather(c: &Communicator, send: &Arg, recv: &Arg) -> Option<Res> {
    let w = coll(c)?;
    let p = c.size() as usize;
    let n = recv.count;
    // SAFETY: the caller's contract: p blocks of n elements.
    let mut o = unsafe { Out::new(recv.ptr, n * p, &recv.dt, send.in_place()) };
    let mine: Vec<u8> = if send.in_place() {
        let b = n * recv.dt.size();
        o.bytes()[c.rank as usize * b..][..b].to_vec()
    } else {
        // SAFETY: the caller's contract.
        unsafe { input(send.ptr, send.count, &send.dt) }.into_owned()
    };
    let r = outcome(w.allgather(&mine, o.bytes()));
    if r.is_ok() {
        o.done();
    }
    Some(r)
}

/// # Safety
/// The C call's contract; `send.ptr` may be `IN_PLACE`.
pub unsafe fn alltoall(c: &Communicator, send: &Arg, recv: &Arg) -> Option<Res> {
    let w = coll(c)?;
    let p = c.size() as usize;
    // SAFETY: the caller's contract: p blocks on each side.
    let mut o = unsafe { Out::new(recv.ptr, recv.count * p, &recv.dt, send.in_place()) };
    let all: Vec<u8> = if send.in_place() {
        o.bytes().to_vec()
    } else {
        // SAFETY: the caller's contract.
        unsafe { input(send.ptr, send.count * p, &send.dt) }.into_owned()
    };
    let r = outcome(w.alltoall(&all, o.bytes()));
    if r.is_ok() {
        o.done();
    }
    Some(r)
}

/// Reduce (`root`) or allreduce, for operations and contiguous types `Coll` computes.
///
/// # Safety
/// The C call's contract; `send` may be `IN_PLACE`.
pub unsafe fn reduce(
    c: &Communicator,
    send: *const u8,
    recv: *mut u8,
    count: usize,
    dt: &Datatype,
    op: &Op,
    root: Option<u32>,
) -> Option<Res> {
    let (b, k) = dt.basic()?;
    if !dt.contiguous() || k == 0 {
        return None;
    }
    let (cop, cdt) = op.for_collectives(b)?;
    let w = coll(c)?;
    let len = count * dt.size();
    let inplace = std::ptr::eq(send, super::plan::IN_PLACE);
    let tlb = dt.true_lb();
    let view = |p: *const u8| -> &[u8] {
        if len == 0 {
            return &[];
        }
        // SAFETY: the caller's contract: contiguous, the data is `len` bytes from true_lb.
        unsafe { std::slice::from_raw_parts(p.wrapping_offset(tlb), len) }
    };
    match root {
        Some(root) => {
            if c.rank == root {
                let out: &mut [u8] = if len == 0 {
                    &mut []
                } else {
                    // SAFETY: as above, for the root's receive buffer.
                    unsafe { std::slice::from_raw_parts_mut(recv.wrapping_offset(tlb), len) }
                };
                let mine: Cow<[u8]> = if inplace {
                    Cow::Owned(out.to_vec())
                } else {
                    Cow::Borrowed(view(send))
                };
                Some(outcome(w.reduce_bytes(&mine, out, cdt, &cop, root)))
            } else {
                Some(outcome(w.reduce_bytes(
                    view(send),
                    &mut [],
                    cdt,
                    &cop,
                    root,
                )))
            }
        }
        None => {
            let out: &mut [u8] = if len == 0 {
                &mut []
            } else {
                // SAFETY: as above.
                unsafe { std::slice::from_raw_parts_mut(recv.wrapping_offset(tlb), len) }
            };
            if !inplace && len > 0 {
                out.copy_from_slice(view(send));
            }
            Some(outcome(w.allreduce_bytes(out, cdt, &cop)))
        }
    }
}
