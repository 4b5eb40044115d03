//! `bulkwire.h`'s collectives for C, over [`bulkwire_collectives::Coll`]: barrier,
//! broadcast, scatter, gather, allgather, alltoall, alltoallv, reduce and allreduce, with
//! counts in elements of a `bw_datatype`, the built-in reductions and user operations.
//!
//! The process's `Coll` is made by the first collective call (calls are collective, so
//! every process makes it at the same point of its program) and dropped by `bw_finalize`
//! before the communicator it borrows. Arguments are checked before anything is sent;
//! every error returns a code and leaves a message naming the call, the rank and the
//! bounds for `bw_last_error`. Nothing unwinds into C.

use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::fmt::Display;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

use bulkwire_collectives::{Coll, Datatype, Error, Op, UserOp};
use bulkwire_p2p::Comm;

use crate::p2p::{
    BW_ERR_ARG, BW_ERR_INIT, BW_ERR_JOB_FAILED, BW_ERR_PEER_DEAD, BW_ERR_TRANSPORT, BW_SUCCESS,
    ffi, set_last,
};

/// Root out of range.
pub const BW_ERR_ROOT: c_int = 14;
/// A count (or counts times processes) too large for the address space.
pub const BW_ERR_COUNT: c_int = 15;
/// Not a `bw_datatype`.
pub const BW_ERR_DATATYPE: c_int = 16;
/// Not a built-in operation nor a live user operation.
pub const BW_ERR_OP: c_int = 17;

pub const BW_INT8: c_int = 1;
pub const BW_INT16: c_int = 2;
pub const BW_INT32: c_int = 3;
pub const BW_INT64: c_int = 4;
pub const BW_UINT8: c_int = 5;
pub const BW_UINT16: c_int = 6;
pub const BW_UINT32: c_int = 7;
pub const BW_UINT64: c_int = 8;
pub const BW_FLOAT: c_int = 9;
pub const BW_DOUBLE: c_int = 10;

pub const BW_OP_NULL: c_int = 0;
pub const BW_SUM: c_int = 1;
pub const BW_MIN: c_int = 2;
pub const BW_MAX: c_int = 3;
pub const BW_PROD: c_int = 4;
/// User operations get handles from here up, never reused within a process, so a freed
/// handle cannot silently name a newer operation.
const FIRST_USER_OP: c_int = 16;

/// `bw_user_function`: `inout[i] = in[i] op inout[i]` for `count` elements of `dt`, where
/// `in` holds the combined values of lower ranks.
pub type BwUserFunction = unsafe extern "C" fn(
    input: *const c_void,
    inout: *mut c_void,
    count: usize,
    dt: c_int,
    ctx: *mut c_void,
);

const TYPES: [(c_int, Datatype, &str); 10] = [
    (BW_INT8, Datatype::I8, "BW_INT8"),
    (BW_INT16, Datatype::I16, "BW_INT16"),
    (BW_INT32, Datatype::I32, "BW_INT32"),
    (BW_INT64, Datatype::I64, "BW_INT64"),
    (BW_UINT8, Datatype::U8, "BW_UINT8"),
    (BW_UINT16, Datatype::U16, "BW_UINT16"),
    (BW_UINT32, Datatype::U32, "BW_UINT32"),
    (BW_UINT64, Datatype::U64, "BW_UINT64"),
    (BW_FLOAT, Datatype::F32, "BW_FLOAT"),
    (BW_DOUBLE, Datatype::F64, "BW_DOUBLE"),
];

fn dt_code(d: Datatype) -> c_int {
    TYPES.iter().find(|t| t.1 == d).map_or(0, |t| t.0)
}

// Every thread that calls a collective shares the one `Coll` (it serialises calls).
const _: () = {
    const fn shared<T: Sync>() {}
    shared::<Coll<'static>>();
};

/// The process's collectives, leaked by the first collective call and reclaimed by
/// `bw_finalize` (which, as in MPI, must not race with other calls).
static COLL: AtomicPtr<Coll<'static>> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises the making of [`COLL`]; holds the failure if making it failed. The failure
/// stays: the processes would not agree on a second attempt (some may have succeeded).
static SETUP: Mutex<Option<(c_int, String)>> = Mutex::new(None);

struct UserOps {
    next: c_int,
    ops: BTreeMap<c_int, Op>,
}

static USER_OPS: Mutex<UserOps> = Mutex::new(UserOps {
    next: FIRST_USER_OP,
    ops: BTreeMap::new(),
});

/// A user's function and context. The C contract (`bulkwire.h`) is that the function may
/// be called with its context from any thread that calls a collective.
#[derive(Clone, Copy)]
struct CFn {
    f: BwUserFunction,
    ctx: *mut c_void,
}

// SAFETY: the function and its context are only used as the user declared them usable
// (see `CFn`); bulkwire itself never dereferences `ctx`.
unsafe impl Send for CFn {}
// SAFETY: as above.
unsafe impl Sync for CFn {}

impl CFn {
    /// `inout = input op inout` through the user's function. Buffers may sit at any byte
    /// offset (data lands where the transport put it), while C code will index them as
    /// `double *` and so on: misaligned operands go through aligned scratch first.
    fn apply(&self, input: &[u8], inout: &mut [u8], dt: Datatype) {
        let z = dt.size();
        let count = inout.len() / z;
        if count == 0 {
            return;
        }
        let aligned = |p: *const u8| (p as usize).is_multiple_of(z);
        let code = dt_code(dt);
        if aligned(input.as_ptr()) && aligned(inout.as_ptr()) {
            // SAFETY: two aligned arrays of `count` elements of `dt`, the user function's
            // contract; `inout` is exclusively ours for the call.
            unsafe {
                (self.f)(
                    input.as_ptr().cast(),
                    inout.as_mut_ptr().cast(),
                    count,
                    code,
                    self.ctx,
                )
            };
            return;
        }
        let words = inout.len().div_ceil(8);
        let mut a = vec![0u64; words];
        let mut b = vec![0u64; words];
        let n = inout.len();
        bulkwire_collectives::as_bytes_mut(&mut a)[..n].copy_from_slice(&input[..n]);
        bulkwire_collectives::as_bytes_mut(&mut b)[..n].copy_from_slice(inout);
        // SAFETY: 8-byte aligned scratch holding `count` elements each.
        unsafe {
            (self.f)(
                a.as_ptr().cast(),
                b.as_mut_ptr().cast(),
                count,
                code,
                self.ctx,
            )
        };
        inout.copy_from_slice(&bulkwire_collectives::as_bytes(&b)[..n]);
    }
}

/// The call being made, for error messages.
struct Ctx {
    name: &'static str,
    me: u32,
    p: u32,
}

impl Ctx {
    /// Records "`call` on rank r of p: msg" for `bw_last_error` and returns `code`.
    fn fail(&self, code: c_int, msg: impl Display) -> c_int {
        set_last(&format!(
            "{} on rank {} of {}: {msg}",
            self.name, self.me, self.p
        ));
        code
    }

    fn coll_err(&self, e: &Error) -> c_int {
        self.fail(code_of(e), e)
    }

    fn datatype(&self, dt: c_int) -> Result<(Datatype, &'static str), c_int> {
        match TYPES.iter().find(|t| t.0 == dt) {
            Some(&(_, d, name)) => Ok((d, name)),
            None => Err(self.fail(
                BW_ERR_DATATYPE,
                format_args!(
                    "datatype {dt} is not a bw_datatype (BW_INT8 = {BW_INT8} to BW_DOUBLE = \
                     {BW_DOUBLE})"
                ),
            )),
        }
    }

    fn root(&self, root: c_int) -> Result<u32, c_int> {
        if root >= 0 && (root as u32) < self.p {
            Ok(root as u32)
        } else {
            Err(self.fail(
                BW_ERR_ROOT,
                format_args!(
                    "root {root} is out of range: the ranks are 0 to {}",
                    self.p - 1
                ),
            ))
        }
    }

    fn op(&self, op: c_int) -> Result<Op, c_int> {
        match op {
            BW_SUM => Ok(Op::Sum),
            BW_MIN => Ok(Op::Min),
            BW_MAX => Ok(Op::Max),
            BW_PROD => Ok(Op::Prod),
            _ => user_ops().ops.get(&op).cloned().ok_or_else(|| {
                self.fail(
                    BW_ERR_OP,
                    format_args!(
                        "op {op} is neither BW_SUM, BW_MIN, BW_MAX, BW_PROD ({BW_SUM} to \
                         {BW_PROD}) nor a user operation that exists (never created, or freed)"
                    ),
                )
            }),
        }
    }

    /// Bytes of `count` elements of `z` bytes, `times` over; at most `isize::MAX` (a Rust
    /// slice's limit, and more than any buffer can be).
    fn extent(
        &self,
        what: &str,
        count: usize,
        (z, tname): (usize, &str),
        times: usize,
    ) -> Result<usize, c_int> {
        count
            .checked_mul(z)
            .and_then(|b| b.checked_mul(times))
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| {
                let per = if times == 1 {
                    String::new()
                } else {
                    format!(" times {times} processes")
                };
                self.fail(
                    BW_ERR_COUNT,
                    format_args!(
                        "{what}: {count} elements of {tname} ({z} bytes each){per} overflow: \
                         at most {} bytes",
                        isize::MAX
                    ),
                )
            })
    }

    fn check_buf(&self, what: &str, buf: *const c_void, len: usize) -> Result<(), c_int> {
        if buf.is_null() && len > 0 {
            return Err(self.fail(
                BW_ERR_ARG,
                format_args!("{what} is NULL but must hold {len} bytes"),
            ));
        }
        Ok(())
    }

    /// `len` bytes at `buf` (null allowed when `len` is 0).
    ///
    /// # Safety
    /// `buf` valid for reads of `len` bytes, not written during the call.
    unsafe fn bytes<'a>(
        &self,
        what: &str,
        buf: *const c_void,
        len: usize,
    ) -> Result<&'a [u8], c_int> {
        self.check_buf(what, buf, len)?;
        if len == 0 {
            return Ok(&[]);
        }
        // SAFETY: non-null, valid for `len` bytes by the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts(buf.cast(), len) })
    }

    /// # Safety
    /// `buf` valid for reads and writes of `len` bytes, not otherwise accessed during the
    /// call.
    unsafe fn bytes_mut<'a>(
        &self,
        what: &str,
        buf: *mut c_void,
        len: usize,
    ) -> Result<&'a mut [u8], c_int> {
        self.check_buf(what, buf, len)?;
        if len == 0 {
            return Ok(&mut []);
        }
        // SAFETY: as in `bytes`, and exclusive by contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(buf.cast(), len) })
    }

    /// Refuses a send and a receive buffer that share bytes: the call would read what it
    /// is writing (and Rust slices may not alias).
    fn disjoint(
        &self,
        send: *const c_void,
        slen: usize,
        recv: *const c_void,
        rlen: usize,
    ) -> Result<(), c_int> {
        let (s, r) = (send as usize, recv as usize);
        if slen > 0 && rlen > 0 && s < r + rlen && r < s + slen {
            return Err(self.fail(
                BW_ERR_ARG,
                format_args!(
                    "the send buffer ({slen} bytes at {send:p}) and the receive buffer \
                     ({rlen} bytes at {recv:p}) overlap"
                ),
            ));
        }
        Ok(())
    }

    /// The process's collectives, made on first use (collectively).
    fn coll(&self, comm: &'static Comm) -> Result<&'static Coll<'static>, c_int> {
        let p = COLL.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: set from a leaked Box below and reclaimed only by `release`, which the
            // caller must not race with (bw_finalize's contract).
            return Ok(unsafe { &*p });
        }
        let mut setup = SETUP.lock().unwrap_or_else(|e| e.into_inner());
        let p = COLL.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: as above; another thread made it while this one waited.
            return Ok(unsafe { &*p });
        }
        if let Some((code, why)) = &*setup {
            return Err(self.fail(
                *code,
                format_args!("the collectives could not be set up: {why}"),
            ));
        }
        let cfg = match crate::settings::get() {
            Ok(s) => s.coll.clone(),
            // bw_init has read them already; they cannot be bad here.
            Err(e) => return Err(self.fail(BW_ERR_INIT, format_args!("{e}"))),
        };
        match Coll::new(comm, cfg) {
            Ok(c) => {
                let p = Box::into_raw(Box::new(c));
                COLL.store(p, Ordering::Release);
                // SAFETY: just leaked; lives until `release`.
                Ok(unsafe { &*p })
            }
            Err(e) => {
                let code = code_of(&e);
                *setup = Some((code, e.to_string()));
                Err(self.fail(
                    code,
                    format_args!("the collectives could not be set up: {e}"),
                ))
            }
        }
    }
}

fn user_ops() -> std::sync::MutexGuard<'static, UserOps> {
    USER_OPS.lock().unwrap_or_else(|e| e.into_inner())
}

fn code_of(e: &Error) -> c_int {
    match e {
        Error::P2p(e) => crate::p2p::code_of(e),
        Error::Arg(_) => BW_ERR_ARG,
        Error::Root { .. } => BW_ERR_ROOT,
        Error::Peer { .. } => BW_ERR_PEER_DEAD,
        Error::Shm(_) | Error::Mcast(_) => BW_ERR_TRANSPORT,
        Error::Config(_) => BW_ERR_INIT,
        // Only a failed collective breaks them, and a failed collective fails the job.
        Error::Broken(_) => BW_ERR_JOB_FAILED,
    }
}

/// Drops the collectives and the user operations (from `bw_finalize`, before the
/// communicator goes).
pub(crate) fn release() {
    let mut setup = SETUP.lock().unwrap_or_else(|e| e.into_inner());
    let p = COLL.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !p.is_null() {
        // SAFETY: from Box::into_raw in `Ctx::coll`, just taken out of COLL; no call is in
        // flight (bw_finalize's contract).
        drop(unsafe { Box::from_raw(p) });
    }
    *setup = None;
    user_ops().ops.clear();
}

/// Texts of the collectives' error codes (for `bw_error_string`).
pub(crate) fn error_string(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        BW_ERR_ROOT => c"root out of range",
        BW_ERR_COUNT => c"count too large (the buffer would exceed the address space)",
        BW_ERR_DATATYPE => c"invalid datatype",
        BW_ERR_OP => c"invalid reduction operation",
        _ => c"unknown error code",
    };
    s.as_ptr()
}

/// Runs a collective entry point: the communicator (or the not-initialised error, naming
/// the call), then `f`, inside [`ffi`] so that nothing unwinds into C.
fn entry(name: &'static str, f: impl FnOnce(&Ctx, &'static Comm) -> Result<(), c_int>) -> c_int {
    ffi(|| {
        let comm = crate::p2p::comm().inspect_err(|_| {
            set_last(&format!(
                "{name}: bulkwire is not initialised (call bw_init first)"
            ));
        })?;
        let cx = Ctx {
            name,
            me: comm.rank(),
            p: comm.size(),
        };
        f(&cx, comm).map(|()| BW_SUCCESS)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn bw_barrier() -> c_int {
    entry("bw_barrier", |cx, comm| {
        cx.coll(comm)?.barrier().map_err(|e| cx.coll_err(&e))
    })
}

/// # Safety
/// `buf` valid for reads and writes of `count` elements of `dt`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_bcast(buf: *mut c_void, count: usize, dt: c_int, root: c_int) -> c_int {
    entry("bw_bcast", |cx, comm| {
        let (d, tn) = cx.datatype(dt)?;
        let root = cx.root(root)?;
        let len = cx.extent("buf", count, (d.size(), tn), 1)?;
        // SAFETY: forwarded contract.
        let b = unsafe { cx.bytes_mut("buf", buf, len) }?;
        cx.coll(comm)?
            .broadcast(b, root)
            .map_err(|e| cx.coll_err(&e))
    })
}

/// # Safety
/// At the root `sendbuf` valid for reads of `count` x size elements of `dt` (ignored
/// elsewhere); `recvbuf` valid for writes of `count` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dt: c_int,
    root: c_int,
) -> c_int {
    entry("bw_scatter", |cx, comm| {
        let (d, tn) = cx.datatype(dt)?;
        let root = cx.root(root)?;
        let rlen = cx.extent("recvbuf", count, (d.size(), tn), 1)?;
        let slen = cx.extent("sendbuf", count, (d.size(), tn), cx.p as usize)?;
        let send: &[u8] = if cx.me == root {
            cx.disjoint(sendbuf, slen, recvbuf, rlen)?;
            // SAFETY: forwarded contract.
            unsafe { cx.bytes("sendbuf", sendbuf, slen) }?
        } else {
            &[]
        };
        // SAFETY: forwarded contract.
        let recv = unsafe { cx.bytes_mut("recvbuf", recvbuf, rlen) }?;
        cx.coll(comm)?
            .scatter(send, recv, root)
            .map_err(|e| cx.coll_err(&e))
    })
}

/// # Safety
/// `sendbuf` valid for reads of `count` elements of `dt`; at the root `recvbuf` valid for
/// writes of `count` x size elements (ignored elsewhere).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_gather(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dt: c_int,
    root: c_int,
) -> c_int {
    entry("bw_gather", |cx, comm| {
        let (d, tn) = cx.datatype(dt)?;
        let root = cx.root(root)?;
        let slen = cx.extent("sendbuf", count, (d.size(), tn), 1)?;
        let rlen = cx.extent("recvbuf", count, (d.size(), tn), cx.p as usize)?;
        // SAFETY: forwarded contract.
        let send = unsafe { cx.bytes("sendbuf", sendbuf, slen) }?;
        let recv: &mut [u8] = if cx.me == root {
            cx.disjoint(sendbuf, slen, recvbuf, rlen)?;
            // SAFETY: forwarded contract.
            unsafe { cx.bytes_mut("recvbuf", recvbuf, rlen) }?
        } else {
            &mut []
        };
        cx.coll(comm)?
            .gather(send, recv, root)
            .map_err(|e| cx.coll_err(&e))
    })
}

/// # Safety
/// `sendbuf` valid for reads of `count` elements of `dt`; `recvbuf` for writes of
/// `count` x size; the two do not overlap.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_allgather(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dt: c_int,
) -> c_int {
    entry("bw_allgather", |cx, comm| {
        let (d, tn) = cx.datatype(dt)?;
        let slen = cx.extent("sendbuf", count, (d.size(), tn), 1)?;
        let rlen = cx.extent("recvbuf", count, (d.size(), tn), cx.p as usize)?;
        cx.disjoint(sendbuf, slen, recvbuf, rlen)?;
        // SAFETY: forwarded contract.
        let send = unsafe { cx.bytes("sendbuf", sendbuf, slen) }?;
        // SAFETY: forwarded contract.
        let recv = unsafe { cx.bytes_mut("recvbuf", recvbuf, rlen) }?;
        cx.coll(comm)?
            .allgather(send, recv)
            .map_err(|e| cx.coll_err(&e))
    })
}

/// # Safety
/// `sendbuf` valid for reads and `recvbuf` for writes of `count` x size elements of `dt`
/// (`count` per process); the two do not overlap.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_alltoall(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dt: c_int,
) -> c_int {
    entry("bw_alltoall", |cx, comm| {
        let (d, tn) = cx.datatype(dt)?;
        let len = cx.extent("sendbuf", count, (d.size(), tn), cx.p as usize)?;
        cx.disjoint(sendbuf, len, recvbuf, len)?;
        // SAFETY: forwarded contract.
        let send = unsafe { cx.bytes("sendbuf", sendbuf, len) }?;
        // SAFETY: forwarded contract.
        let recv = unsafe { cx.bytes_mut("recvbuf", recvbuf, len) }?;
        cx.coll(comm)?
            .alltoall(send, recv)
            .map_err(|e| cx.coll_err(&e))
    })
}

/// One side of an alltoallv: counts and displacements (elements) turned into bytes, and
/// the extent of the buffer they cover.
struct Layout {
    counts: Vec<usize>,
    displs: Vec<usize>,
    len: usize,
}

impl Ctx {
    /// # Safety
    /// `counts` and `displs` are null or valid for `p` reads each.
    unsafe fn layout(
        &self,
        (cname, dname): (&str, &str),
        counts: *const usize,
        displs: *const usize,
        (z, tn): (usize, &str),
    ) -> Result<Layout, c_int> {
        let p = self.p as usize;
        for (what, a) in [(cname, counts), (dname, displs)] {
            if a.is_null() {
                return Err(self.fail(
                    BW_ERR_ARG,
                    format_args!("{what} is NULL but must hold {p} entries"),
                ));
            }
        }
        // SAFETY: non-null, `p` entries each by contract.
        let (c, d) = unsafe {
            (
                std::slice::from_raw_parts(counts, p),
                std::slice::from_raw_parts(displs, p),
            )
        };
        let mut out = Layout {
            counts: Vec::with_capacity(p),
            displs: Vec::with_capacity(p),
            len: 0,
        };
        for j in 0..p {
            let end = d[j].checked_add(c[j]).ok_or_else(|| {
                self.fail(
                    BW_ERR_COUNT,
                    format_args!(
                        "{dname}[{j}] = {} plus {cname}[{j}] = {} overflows",
                        d[j], c[j]
                    ),
                )
            })?;
            let what = format!("{dname}[{j}] + {cname}[{j}]");
            let bytes = self.extent(&what, end, (z, tn), 1)?;
            out.len = out.len.max(bytes);
            // Both at most `end * z`, which did not overflow.
            out.counts.push(c[j] * z);
            out.displs.push(d[j] * z);
        }
        Ok(out)
    }
}

/// # Safety
/// `sendcounts`, `sdispls`, `recvcounts` and `rdispls` valid for size reads each;
/// `sendbuf` valid for reads and `recvbuf` for writes of the elements of `dt` they
/// describe; the send and receive buffers do not overlap.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const usize,
    sdispls: *const usize,
    recvbuf: *mut c_void,
    recvcounts: *const usize,
    rdispls: *const usize,
    dt: c_int,
) -> c_int {
    entry("bw_alltoallv", |cx, comm| {
        let (d, tn) = cx.datatype(dt)?;
        let z = (d.size(), tn);
        // SAFETY: forwarded contract.
        let s = unsafe { cx.layout(("sendcounts", "sdispls"), sendcounts, sdispls, z) }?;
        // SAFETY: forwarded contract.
        let r = unsafe { cx.layout(("recvcounts", "rdispls"), recvcounts, rdispls, z) }?;
        let me = cx.me as usize;
        // The one pairwise match a process can check alone (the rest is checked while
        // communicating, where a mismatch fails the job). Unchecked, the collectives'
        // copy of a process's own block panics on it.
        if s.counts[me] != r.counts[me] {
            return Err(cx.fail(
                BW_ERR_ARG,
                format_args!(
                    "sendcounts[{me}] = {} but recvcounts[{me}] = {}: what a process sends \
                     itself is what it receives from itself",
                    s.counts[me] / d.size(),
                    r.counts[me] / d.size()
                ),
            ));
        }
        cx.disjoint(sendbuf, s.len, recvbuf, r.len)?;
        // SAFETY: forwarded contract.
        let send = unsafe { cx.bytes("sendbuf", sendbuf, s.len) }?;
        // SAFETY: forwarded contract.
        let recv = unsafe { cx.bytes_mut("recvbuf", recvbuf, r.len) }?;
        cx.coll(comm)?
            .alltoallv(send, &s.counts, &s.displs, recv, &r.counts, &r.displs)
            .map_err(|e| cx.coll_err(&e))
    })
}

/// # Safety
/// `sendbuf` valid for reads of `count` elements of `dt`; at the root `recvbuf` valid for
/// writes of as many (ignored elsewhere), either equal to `sendbuf` (in place) or not
/// overlapping it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dt: c_int,
    op: c_int,
    root: c_int,
) -> c_int {
    entry("bw_reduce", |cx, comm| {
        let (d, tn) = cx.datatype(dt)?;
        let op = cx.op(op)?;
        let root = cx.root(root)?;
        let len = cx.extent("sendbuf", count, (d.size(), tn), 1)?;
        let input: Vec<u8>;
        let (send, recv): (&[u8], &mut [u8]) = if cx.me != root {
            // SAFETY: forwarded contract.
            (unsafe { cx.bytes("sendbuf", sendbuf, len) }?, &mut [])
        } else if len > 0 && std::ptr::eq(sendbuf, recvbuf) {
            // In place: the input is copied out before the buffer is lent as the result.
            // SAFETY: forwarded contract.
            input = unsafe { cx.bytes("sendbuf", sendbuf, len) }?.to_vec();
            // SAFETY: forwarded contract.
            (&input, unsafe { cx.bytes_mut("recvbuf", recvbuf, len) }?)
        } else {
            cx.disjoint(sendbuf, len, recvbuf, len)?;
            // SAFETY: forwarded contract; the buffers do not overlap.
            unsafe {
                (
                    cx.bytes("sendbuf", sendbuf, len)?,
                    cx.bytes_mut("recvbuf", recvbuf, len)?,
                )
            }
        };
        let r = cx.coll(comm)?.reduce_bytes(send, recv, d, &op, root);
        r.map_err(|e| cx.coll_err(&e))
    })
}

/// # Safety
/// `sendbuf` valid for reads and `recvbuf` for writes of `count` elements of `dt`; equal
/// (in place) or not overlapping.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    dt: c_int,
    op: c_int,
) -> c_int {
    entry("bw_allreduce", |cx, comm| {
        let (d, tn) = cx.datatype(dt)?;
        let op = cx.op(op)?;
        let len = cx.extent("sendbuf", count, (d.size(), tn), 1)?;
        cx.check_buf("sendbuf", sendbuf, len)?;
        // SAFETY: forwarded contract.
        let buf = unsafe { cx.bytes_mut("recvbuf", recvbuf, len) }?;
        if len > 0 && !std::ptr::eq(sendbuf, recvbuf) {
            cx.disjoint(sendbuf, len, recvbuf, len)?;
            // SAFETY: `len` readable bytes at sendbuf (contract), not overlapping `buf`.
            let send = unsafe { std::slice::from_raw_parts(sendbuf.cast::<u8>(), len) };
            buf.copy_from_slice(send);
        }
        cx.coll(comm)?
            .allreduce_bytes(buf, d, &op)
            .map_err(|e| cx.coll_err(&e))
    })
}

/// Makes a user operation. Not collective, and allowed before `bw_init`.
///
/// # Safety
/// `op` valid for a write; `function` callable with `ctx` from any thread that calls a
/// collective, until the operation is freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_op_create(
    function: Option<BwUserFunction>,
    commutative: c_int,
    ctx: *mut c_void,
    op: *mut c_int,
) -> c_int {
    ffi(|| {
        let Some(f) = function else {
            set_last("bw_op_create: the function is NULL");
            return Err(BW_ERR_ARG);
        };
        if op.is_null() {
            set_last("bw_op_create: op (where the handle goes) is NULL");
            return Err(BW_ERR_ARG);
        }
        let cf = CFn { f, ctx };
        let user = UserOp::from_raw(move |i, io, dt| cf.apply(i, io, dt), commutative != 0);
        let mut ops = user_ops();
        let Some(next) = ops.next.checked_add(1) else {
            set_last("bw_op_create: out of operation handles");
            return Err(BW_ERR_OP);
        };
        let h = std::mem::replace(&mut ops.next, next);
        ops.ops.insert(h, Op::User(user));
        // SAFETY: non-null, valid for a write by contract.
        unsafe { op.write(h) };
        Ok(BW_SUCCESS)
    })
}

/// Frees a user operation and sets `*op` to `BW_OP_NULL`. A collective already running
/// with it finishes with it.
///
/// # Safety
/// `op` valid for a read and a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_op_free(op: *mut c_int) -> c_int {
    ffi(|| {
        if op.is_null() {
            set_last("bw_op_free: op is NULL");
            return Err(BW_ERR_ARG);
        }
        // SAFETY: non-null, valid by contract.
        let h = unsafe { op.read() };
        if user_ops().ops.remove(&h).is_none() {
            set_last(&format!(
                "bw_op_free: op {h} is not a user operation that exists (built-in, never \
                 created, or already freed)"
            ));
            return Err(BW_ERR_OP);
        }
        // SAFETY: as above.
        unsafe { op.write(BW_OP_NULL) };
        Ok(BW_SUCCESS)
    })
}

/// Size in bytes of an element of `dt` (0 for an invalid datatype), for C code that sizes
/// buffers generically.
#[unsafe(no_mangle)]
pub extern "C" fn bw_datatype_size(dt: c_int) -> usize {
    TYPES.iter().find(|t| t.0 == dt).map_or(0, |t| t.1.size())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatypes_round_trip() {
        for d in Datatype::ALL {
            let c = dt_code(d);
            assert_eq!(bw_datatype_size(c), d.size());
            assert!(TYPES.iter().any(|t| t.0 == c && t.1 == d));
        }
        assert_eq!(bw_datatype_size(0), 0);
        assert_eq!(bw_datatype_size(BW_DOUBLE + 1), 0);
    }

    unsafe extern "C" fn xor_then_mark(
        input: *const c_void,
        inout: *mut c_void,
        count: usize,
        dt: c_int,
        ctx: *mut c_void,
    ) {
        assert_eq!(dt, BW_UINT64);
        // SAFETY: the shim hands aligned arrays of `count` u64s and our own counter.
        unsafe {
            let a = std::slice::from_raw_parts(input.cast::<u64>(), count);
            let b = std::slice::from_raw_parts_mut(inout.cast::<u64>(), count);
            assert!((input as usize).is_multiple_of(8) && (inout as usize).is_multiple_of(8));
            for (x, y) in a.iter().zip(b) {
                *y ^= *x;
            }
            *ctx.cast::<usize>() += 1;
        }
    }

    #[test]
    fn user_function_sees_aligned_operands() {
        let mut calls = 0usize;
        let cf = CFn {
            f: xor_then_mark,
            ctx: (&raw mut calls).cast(),
        };
        let lo: Vec<u8> = (0..17).collect();
        let mut hi: Vec<u8> = vec![0xff; 17];
        // Offset 1: misaligned for u64 whatever the allocation's alignment.
        cf.apply(&lo[1..], &mut hi[1..], Datatype::U64);
        for i in 1..17 {
            assert_eq!(hi[i], 0xff ^ lo[i]);
        }
        assert_eq!(hi[0], 0xff);
        cf.apply(&lo[..0], &mut hi[..0], Datatype::U64);
        assert_eq!(calls, 1, "an empty operand is not passed to the user");
    }

    #[test]
    fn user_op_handles_are_unique_and_freed() {
        let mut a = 0;
        let mut b = 0;
        // SAFETY: valid out-pointers; the function is never called here.
        unsafe {
            assert_eq!(
                bw_op_create(Some(xor_then_mark), 1, std::ptr::null_mut(), &mut a),
                BW_SUCCESS
            );
            assert_eq!(
                bw_op_create(Some(xor_then_mark), 0, std::ptr::null_mut(), &mut b),
                BW_SUCCESS
            );
            assert!(a >= FIRST_USER_OP && b > a);
            let freed = a;
            assert_eq!(bw_op_free(&mut a), BW_SUCCESS);
            assert_eq!(a, BW_OP_NULL);
            let mut again = freed;
            assert_eq!(bw_op_free(&mut again), BW_ERR_OP);
            assert_eq!(bw_op_free(&mut b), BW_SUCCESS);
            assert_eq!(
                bw_op_create(None, 1, std::ptr::null_mut(), &mut a),
                BW_ERR_ARG
            );
        }
    }
}
