//! Requests: what `MPI_Isend`, `MPI_Irecv`, persistent requests and non-blocking
//! collectives return, and every `MPI_Wait*` / `MPI_Test*` call.
//!
//! A request is a p2p request in flight, an [`Operation`] (a non-blocking collective)
//! driven by the table, or a completed status. Each request has its own lock; the
//! table's lock is held only to find it, and no lock is held while a call waits in p2p.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::{Arc, Mutex};

use bulkwire_p2p::{ReqId, Status};

use crate::comm::Communicator;
use crate::dt::Datatype;
use crate::error::*;
use crate::group::{put, tri};
use crate::handle::{Kind, Raw, Table};
use crate::predef::*;
use crate::runtime::{code_of, fail, p2p};

/// A non-blocking operation that the request table drives.
pub trait Operation: Send {
    /// Moves the operation on without blocking; `Some(result)` once complete.
    fn progress(&mut self) -> Option<Result<(), c_int>>;
}

/// `MPI_Status` as `mpi.h` lays it out: the received byte count (i64) in
/// `internal[0..2]`, whether the request was cancelled in `internal[2]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MpiStatus {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    pub internal: [c_int; 5],
}

impl MpiStatus {
    /// The status of an inactive or null request, and of a completed operation without
    /// a message.
    pub const EMPTY: MpiStatus = MpiStatus {
        source: MPI_ANY_SOURCE,
        tag: MPI_ANY_TAG,
        error: MPI_SUCCESS,
        internal: [0; 5],
    };

    pub fn new(source: c_int, tag: c_int, error: c_int, bytes: i64) -> MpiStatus {
        let mut s = MpiStatus {
            source,
            tag,
            error,
            internal: [0; 5],
        };
        s.set_bytes(bytes);
        s
    }

    pub fn bytes(&self) -> i64 {
        (i64::from(self.internal[1]) << 32) | i64::from(self.internal[0] as u32)
    }

    pub fn set_bytes(&mut self, n: i64) {
        self.internal[0] = n as c_int;
        self.internal[1] = (n >> 32) as c_int;
    }

    pub fn cancelled(&self) -> bool {
        self.internal[2] != 0
    }

    pub fn set_cancelled(&mut self, c: bool) {
        self.internal[2] = c_int::from(c);
    }
}

/// Bytes received into a staging buffer, to be unpacked into the user's layout.
pub(crate) struct Unpack {
    pub data: Vec<u8>,
    pub buf: *mut u8,
    pub count: usize,
    pub dt: Arc<Datatype>,
}

pub(crate) enum Body {
    P2p {
        id: ReqId,
        comm: Arc<Communicator>,
        recv: bool,
        /// A send's packed bytes, or a receive's staging buffer (kept until completion).
        send_stage: Option<Vec<u8>>,
        unpack: Option<Unpack>,
    },
    Op(Box<dyn Operation>),
    /// A generalized request: the program completes it (`MPI_Grequest_complete`).
    Greq(Greq),
    Done(MpiStatus),
    /// A persistent request not started (or completed and collected).
    Inactive,
}

/// `MPI_Grequest_query_function`, `..._free_function`, `..._cancel_function`.
type QueryFn = unsafe extern "C" fn(*mut c_void, *mut MpiStatus) -> c_int;
type FreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type CancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

pub(crate) struct Greq {
    done: bool,
    query: Option<QueryFn>,
    free: Option<FreeFn>,
    cancel: Option<CancelFn>,
    extra: *mut c_void,
}

impl Greq {
    /// The status the program's query function gives, then its free function.
    fn finish(&self) -> MpiStatus {
        let mut st = MpiStatus::EMPTY;
        if let Some(q) = self.query {
            // SAFETY: the program's function with its own state.
            let rc = unsafe { q(self.extra, &mut st) };
            if rc != MPI_SUCCESS {
                st.error = rc;
            }
        }
        self.release();
        st
    }

    fn release(&self) {
        if let Some(f) = self.free {
            // SAFETY: as above.
            unsafe { f(self.extra) };
        }
    }
}

/// How a persistent request starts again.
pub(crate) type Starter = Box<dyn Fn() -> Result<Body, c_int> + Send>;

pub(crate) struct Req {
    pub body: Body,
    pub persistent: Option<Starter>,
    /// The communicator whose handler reports the request's errors.
    pub comm_h: Raw,
}

// SAFETY: the raw pointers in a body are the program's buffers, handed to p2p for the
// request's life; MPI lets any thread complete a request.
unsafe impl Send for Req {}

type Shared = Arc<Mutex<Req>>;

static REQS: Mutex<Table<Shared>> = Mutex::new(Table::new(Kind::Request));

/// A new request handle for `body`.
pub(crate) fn insert(body: Body, persistent: Option<Starter>, comm_h: Raw) -> Raw {
    let op = matches!(body, Body::Op(_));
    let r = Arc::new(Mutex::new(Req {
        body,
        persistent,
        comm_h,
    }));
    if op {
        OPS.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&r));
    }
    REQS.lock().unwrap_or_else(|e| e.into_inner()).insert(r)
}

/// Operations in flight: every wait drives them all (MPI's progress rule), not only the
/// one it waits for, so that operations that processes start in different orders (two
/// overlapping `MPI_Comm_idup`) complete.
static OPS: Mutex<Vec<std::sync::Weak<Mutex<Req>>>> = Mutex::new(Vec::new());

/// Drives every operation in flight once (those another thread is polling are skipped).
fn progress_ops() {
    let ops: Vec<Shared> = {
        let mut v = OPS.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.iter().filter_map(std::sync::Weak::upgrade).collect()
    };
    let mut done = false;
    for s in ops {
        if let Ok(mut r) = s.try_lock()
            && matches!(r.body, Body::Op(_))
        {
            poll(&mut r);
        } else if let Ok(r) = s.try_lock()
            && !matches!(r.body, Body::Op(_))
        {
            done = true;
        }
    }
    if done {
        let mut v = OPS.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|w| {
            w.upgrade()
                .is_some_and(|s| s.try_lock().map_or(true, |r| matches!(r.body, Body::Op(_))))
        });
    }
}

/// A new request for a non-blocking operation (non-blocking collectives), driven once
/// at once so that its first messages leave now.
pub fn start_operation(mut op: Box<dyn Operation>) -> Raw {
    let body = match op.progress() {
        None => Body::Op(op),
        Some(res) => {
            let mut s = MpiStatus::EMPTY;
            s.error = res.err().unwrap_or(MPI_SUCCESS);
            Body::Done(s)
        }
    };
    insert(body, None, MPI_COMM_WORLD)
}

/// A request already completed, with an empty status.
pub fn completed() -> Raw {
    insert(Body::Done(MpiStatus::EMPTY), None, MPI_COMM_WORLD)
}

fn find(h: Raw) -> Option<Shared> {
    REQS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(h)
        .cloned()
}

fn remove(h: Raw) {
    REQS.lock().unwrap_or_else(|e| e.into_inner()).remove(h);
}

/// The MPI status of a finished p2p request of `comm`.
pub(crate) fn status_of(comm: &Communicator, r: Result<Status, bulkwire_p2p::Error>) -> MpiStatus {
    match r {
        Ok(st) => {
            let src = comm
                .peer_rank_of(st.source)
                .map_or(MPI_UNDEFINED, |r| r as c_int);
            let tag = st.tag & 0xffff;
            MpiStatus::new(src, tag, MPI_SUCCESS, st.len as i64)
        }
        Err(bulkwire_p2p::Error::Cancelled) => {
            let mut s = MpiStatus::EMPTY;
            s.set_cancelled(true);
            s
        }
        Err(e) => {
            let mut s = MpiStatus::EMPTY;
            if let bulkwire_p2p::Error::Truncated { peer, tag, cap, .. } = e {
                s.source = comm
                    .peer_rank_of(peer)
                    .map_or(MPI_UNDEFINED, |r| r as c_int);
                s.tag = tag & 0xffff;
                s.set_bytes(cap as i64);
            }
            s.error = code_of(&e);
            s
        }
    }
}

/// Finishes a p2p body with its outcome: unpacks a staged receive.
fn finish_p2p(body: Body, r: Result<Status, bulkwire_p2p::Error>) -> MpiStatus {
    let Body::P2p { comm, unpack, .. } = body else {
        return MpiStatus::EMPTY;
    };
    let st = status_of(&comm, r.clone());
    if let (Some(u), Ok(s)) = (unpack, r) {
        // SAFETY: the receive's buffer holds `count` elements of `dt`, by the contract of
        // the call that started it.
        unsafe {
            u.dt.unpack(&u.data[..s.len.min(u.data.len())], u.buf, u.count)
        };
    }
    st
}

/// Moves `r` on without blocking; true once its body is `Done` (or inactive).
fn poll(r: &mut Req) -> bool {
    match &mut r.body {
        Body::Done(_) | Body::Inactive => true,
        Body::Greq(g) => {
            if !g.done {
                return false;
            }
            let st = g.finish();
            r.body = Body::Done(st);
            true
        }
        Body::Op(op) => match op.progress() {
            None => false,
            Some(res) => {
                let mut s = MpiStatus::EMPTY;
                s.error = res.err().unwrap_or(MPI_SUCCESS);
                r.body = Body::Done(s);
                true
            }
        },
        Body::P2p { id, .. } => {
            let Ok(p) = p2p() else { return false };
            match p.test_raw(*id) {
                None => false,
                Some(res) => {
                    let b = std::mem::replace(&mut r.body, Body::Inactive);
                    r.body = Body::Done(finish_p2p(b, res));
                    true
                }
            }
        }
    }
}

/// Blocks until `r` is done (the request's lock is not held while p2p waits).
fn wait_shared(s: &Shared) {
    let mut backoff = None;
    loop {
        let id = {
            let mut r = s.lock().unwrap_or_else(|e| e.into_inner());
            match &r.body {
                Body::P2p { id, .. } => *id,
                _ => {
                    if poll(&mut r) {
                        return;
                    }
                    drop(r);
                    backoff.get_or_insert_with(Backoff::new).idle();
                    continue;
                }
            }
        };
        let Ok(p) = p2p() else { return };
        let res = p.wait_raw(id);
        let mut r = s.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(&r.body, Body::P2p { id: i, .. } if *i == id) {
            let b = std::mem::replace(&mut r.body, Body::Inactive);
            r.body = Body::Done(finish_p2p(b, res));
        }
        return;
    }
}

/// How long a wait for an operation (a non-blocking collective, a generalized request)
/// polls before it yields the CPU between rounds: as long as p2p's own waits spin
/// (`bulkwire_engine::DEFAULT_SPIN`). A yield on every round gave the core away to
/// another runnable process at each poll: on two loaded cores an 8 B `MPI_Iallreduce`
/// then waited a scheduler slice for its peer's message instead of ~1 us.
const SPIN: std::time::Duration = std::time::Duration::from_millis(1);

/// The pacing of one wait that p2p does not do itself: polls back to back for [`SPIN`],
/// then yields on each round. Where the job's processes on this host outnumber its CPUs
/// every round yields from the start, as p2p's waits do: the process waited for may
/// need this core.
struct Backoff {
    since: Option<std::time::Instant>,
    rounds: u32,
    yield_now: bool,
}

impl Backoff {
    fn new() -> Backoff {
        let oversubscribed = p2p().is_ok_and(|p| {
            let local = p.host_local().iter().filter(|&&l| l).count();
            local > p.host_cpus().max(1)
        });
        Backoff {
            since: None,
            rounds: 0,
            yield_now: oversubscribed,
        }
    }

    /// One round of waiting: drives p2p and every operation in flight once, then spins
    /// or yields.
    fn idle(&mut self) {
        if let Ok(p) = p2p() {
            p.progress();
        }
        progress_detached();
        progress_ops();
        if self.yield_now {
            std::thread::yield_now();
            return;
        }
        // The clock costs more than a poll: read it every 16 rounds.
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds.is_multiple_of(16) {
            let now = std::time::Instant::now();
            if now - *self.since.get_or_insert(now) >= SPIN {
                self.yield_now = true;
            }
        }
        std::hint::spin_loop();
    }
}

/// Collects a done request: its status; the handle is freed (non-persistent) or the
/// request made inactive (persistent).
fn collect(h: &mut Raw, s: &Shared) -> MpiStatus {
    let mut r = s.lock().unwrap_or_else(|e| e.into_inner());
    let st = match std::mem::replace(&mut r.body, Body::Inactive) {
        Body::Done(st) => st,
        _ => MpiStatus::EMPTY,
    };
    if r.persistent.is_none() {
        drop(r);
        remove(*h);
        *h = MPI_REQUEST_NULL;
    }
    st
}

/// Writes the status of a call that completes one operation: every field but
/// `MPI_ERROR`, which such calls leave alone (they return the error; MPI-3.1 §3.2.5).
///
/// # Safety
/// `p` null or valid for reads and writes.
pub(crate) unsafe fn put_status(p: *mut MpiStatus, mut s: MpiStatus) {
    if !p.is_null() {
        // SAFETY: non-null, valid by the caller's contract.
        unsafe {
            s.error = (*p).error;
            p.write(s);
        }
    }
}

fn comm_of(s: &Shared) -> Raw {
    s.lock().unwrap_or_else(|e| e.into_inner()).comm_h
}

fn bad_request(call: &str, h: Raw) -> c_int {
    fail(
        MPI_COMM_WORLD,
        MPI_ERR_REQUEST,
        format!("{call}: invalid request handle {h:#x}"),
    )
}

/// Reports a completed request's error, if any, through its communicator's handler.
fn report(call: &str, comm: Raw, st: &MpiStatus) -> c_int {
    if st.error == MPI_SUCCESS {
        return MPI_SUCCESS;
    }
    fail(
        comm,
        st.error,
        format!("{call}: the request failed ({})", describe(st)),
    )
}

fn describe(st: &MpiStatus) -> String {
    match st.error {
        MPI_ERR_TRUNCATE => format!(
            "a message from rank {} with tag {} was longer than the {} bytes of the receive buffer",
            st.source,
            st.tag,
            st.bytes()
        ),
        MPI_ERR_PROC_ABORTED => "a peer process died or the job failed".to_string(),
        e => format!("error class {e}"),
    }
}

/// Waits for a body started by a blocking call: its status (errors are the caller's to
/// report).
pub(crate) fn wait_body(body: Body, comm_h: Raw) -> MpiStatus {
    if let Body::Done(st) = body {
        return st;
    }
    let mut h = insert(body, None, comm_h);
    let Some(s) = find(h) else {
        return MpiStatus::EMPTY;
    };
    wait_shared(&s);
    collect(&mut h, &s)
}

// ---- Wait and Test --------------------------------------------------------------------

/// The request at `request` for `MPI_Wait` and `MPI_Test`: `None` for `MPI_REQUEST_NULL`.
///
/// # Safety
/// `request` null or valid for reads and writes.
unsafe fn single<'a>(
    call: &str,
    request: *mut Raw,
) -> Result<Option<(&'a mut Raw, Shared)>, c_int> {
    if request.is_null() {
        return Err(fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            format!("{call}: null request pointer"),
        ));
    }
    // SAFETY: non-null, valid by contract.
    let h = unsafe { &mut *request };
    if *h == MPI_REQUEST_NULL {
        return Ok(None);
    }
    let s = find(*h).ok_or_else(|| bad_request(call, *h))?;
    Ok(Some((h, s)))
}

/// Collects the done request `s` at `h`: its status to `status`, its error reported.
///
/// # Safety
/// `status` null or valid for a write.
unsafe fn finish_single(call: &str, h: &mut Raw, s: &Shared, status: *mut MpiStatus) -> c_int {
    let comm = comm_of(s);
    let st = collect(h, s);
    // SAFETY: the caller's contract.
    unsafe { put_status(status, st) };
    report(call, comm, &st)
}

/// # Safety
/// `request` valid for reads and writes; `status` null or valid for a write.
#[unsafe(export_name = "PMPI_Wait")]
pub unsafe extern "C" fn MPI_Wait(request: *mut Raw, status: *mut MpiStatus) -> c_int {
    // SAFETY: the caller's contract.
    let Some((h, s)) = tri!(unsafe { single("MPI_Wait", request) }) else {
        // SAFETY: the caller's contract.
        unsafe { put_status(status, MpiStatus::EMPTY) };
        return MPI_SUCCESS;
    };
    wait_shared(&s);
    // SAFETY: the caller's contract.
    unsafe { finish_single("MPI_Wait", h, &s, status) }
}

/// # Safety
/// As `MPI_Wait`; `flag` valid for a write.
#[unsafe(export_name = "PMPI_Test")]
pub unsafe extern "C" fn MPI_Test(
    request: *mut Raw,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some((h, s)) = tri!(unsafe { single("MPI_Test", request) }) else {
        // SAFETY: the caller's contract.
        unsafe {
            put(flag, 1);
            put_status(status, MpiStatus::EMPTY);
        }
        return MPI_SUCCESS;
    };
    let done = poll(&mut s.lock().unwrap_or_else(|e| e.into_inner()));
    // SAFETY: the caller's contract.
    unsafe { put(flag, c_int::from(done)) };
    if !done {
        return MPI_SUCCESS;
    }
    // SAFETY: the caller's contract.
    unsafe { finish_single("MPI_Test", h, &s, status) }
}

/// The requests at `reqs`, by index (`None`: null or inactive).
///
/// # Safety
/// `reqs` holds `n` handles.
unsafe fn read(call: &str, n: c_int, reqs: *mut Raw) -> Result<Vec<Option<Shared>>, c_int> {
    if n < 0 || (n > 0 && reqs.is_null()) {
        return Err(fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            format!("{call}: bad request array of {n}"),
        ));
    }
    (0..n as usize)
        .map(|i| {
            // SAFETY: i < n handles, by contract.
            let h = unsafe { *reqs.add(i) };
            if h == MPI_REQUEST_NULL {
                return Ok(None);
            }
            let s = find(h).ok_or_else(|| bad_request(call, h))?;
            let inactive = matches!(
                s.lock().unwrap_or_else(|e| e.into_inner()).body,
                Body::Inactive
            );
            Ok((!inactive).then_some(s))
        })
        .collect()
}

/// The p2p ids of the requests if every active one is a p2p request in flight.
fn p2p_ids(rs: &[Option<Shared>]) -> Option<Vec<Option<ReqId>>> {
    rs.iter()
        .map(|r| match r {
            None => Some(None),
            Some(s) => match &s.lock().unwrap_or_else(|e| e.into_inner()).body {
                Body::P2p { id, .. } => Some(Some(*id)),
                _ => None,
            },
        })
        .collect()
}

/// Stores a p2p outcome collected for request `s` (if it is still that request).
fn store_p2p(s: &Shared, id: ReqId, res: Result<Status, bulkwire_p2p::Error>) {
    let mut r = s.lock().unwrap_or_else(|e| e.into_inner());
    if matches!(&r.body, Body::P2p { id: i, .. } if *i == id) {
        let b = std::mem::replace(&mut r.body, Body::Inactive);
        r.body = Body::Done(finish_p2p(b, res));
    }
}

/// Collects request `i` of the array: its status, written to `statuses[i]`.
///
/// # Safety
/// `reqs` and `statuses` (unless null) hold more than `i` entries.
unsafe fn collect_at(
    reqs: *mut Raw,
    i: usize,
    s: &Shared,
    statuses: *mut MpiStatus,
) -> (Raw, MpiStatus) {
    let comm = comm_of(s);
    // SAFETY: i in bounds by contract.
    let st = collect(unsafe { &mut *reqs.add(i) }, s);
    if !statuses.is_null() {
        // SAFETY: as above.
        unsafe { statuses.add(i).write(st) };
    }
    (comm, st)
}

/// The result of a call on an array of requests: `MPI_ERR_IN_STATUS` through the handler
/// of the first failed request's communicator, if one failed.
fn in_status(call: &str, failed: Option<(Raw, MpiStatus)>) -> c_int {
    match failed {
        None => MPI_SUCCESS,
        Some((comm, st)) => fail(
            comm,
            MPI_ERR_IN_STATUS,
            format!("{call}: a request failed ({})", describe(&st)),
        ),
    }
}

/// # Safety
/// `reqs` holds `count` handles; `statuses` null or holds `count` statuses.
#[unsafe(export_name = "PMPI_Waitall")]
pub unsafe extern "C" fn MPI_Waitall(
    count: c_int,
    reqs: *mut Raw,
    statuses: *mut MpiStatus,
) -> c_int {
    const CALL: &str = "MPI_Waitall";
    // SAFETY: the caller's contract.
    let rs = tri!(unsafe { read(CALL, count, reqs) });
    if let Some(ids) = p2p_ids(&rs)
        && let Ok(p) = p2p()
    {
        let outs = p.wait_all_raw(&ids);
        for (i, o) in outs.into_iter().enumerate() {
            if let (Some(res), Some(s), Some(id)) = (o, &rs[i], ids[i]) {
                store_p2p(s, id, res);
            }
        }
    } else {
        // Every request is driven each round: operations may need each other's
        // progress (on this process or through their peers).
        let mut backoff = Backoff::new();
        while !rs
            .iter()
            .flatten()
            .all(|s| poll(&mut s.lock().unwrap_or_else(|e| e.into_inner())))
        {
            backoff.idle();
        }
    }
    let mut failed = None;
    for (i, r) in rs.iter().enumerate() {
        match r {
            Some(s) => {
                // SAFETY: the caller's contract.
                let (comm, st) = unsafe { collect_at(reqs, i, s, statuses) };
                if st.error != MPI_SUCCESS && failed.is_none() {
                    failed = Some((comm, st));
                }
            }
            None => {
                if !statuses.is_null() {
                    // SAFETY: the caller's contract.
                    unsafe { statuses.add(i).write(MpiStatus::EMPTY) };
                }
            }
        }
    }
    in_status(CALL, failed)
}

/// # Safety
/// As `MPI_Waitall`; `flag` valid for a write.
#[unsafe(export_name = "PMPI_Testall")]
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    reqs: *mut Raw,
    flag: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    // SAFETY: the caller's contract.
    let rs = tri!(unsafe { read("MPI_Testall", count, reqs) });
    if let Ok(p) = p2p() {
        p.progress();
    }
    let all = rs
        .iter()
        .flatten()
        .all(|s| poll(&mut s.lock().unwrap_or_else(|e| e.into_inner())));
    // SAFETY: the caller's contract.
    unsafe { put(flag, c_int::from(all)) };
    if !all {
        return MPI_SUCCESS;
    }
    // SAFETY: the caller's contract.
    unsafe { MPI_Waitall(count, reqs, statuses) }
}

/// Index of a done request among `rs`, polling each once.
fn any_done(rs: &[Option<Shared>]) -> Option<usize> {
    rs.iter().position(|r| {
        r.as_ref()
            .is_some_and(|s| poll(&mut s.lock().unwrap_or_else(|e| e.into_inner())))
    })
}

/// Blocks until one of `rs` (at least one active) is done: its index. Requests all in
/// p2p wait in the p2p layer; others are polled in turn.
fn wait_any(rs: &[Option<Shared>]) -> usize {
    let mut backoff = None;
    loop {
        if let Some(i) = any_done(rs) {
            return i;
        }
        if let Some(ids) = p2p_ids(rs)
            && let Ok(p) = p2p()
            && let Some((i, res)) = p.wait_any_raw(&ids)
        {
            if let (Some(s), Some(id)) = (&rs[i], ids[i]) {
                store_p2p(s, id, res);
            }
            return i;
        }
        backoff.get_or_insert_with(Backoff::new).idle();
    }
}

/// The end of `MPI_Waitany` and `MPI_Testany`: `None` for no request done (`flag` 0),
/// else collects request `i`, with `flag` 1. With no active request at all, `index` is
/// `MPI_UNDEFINED`, `flag` 1 and the status empty.
///
/// # Safety
/// As `MPI_Testany`; `reqs` holds more than `i` handles.
unsafe fn finish_any(
    call: &str,
    rs: &[Option<Shared>],
    done: Option<usize>,
    reqs: *mut Raw,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    let (i, st, comm) = match done {
        _ if rs.iter().all(Option::is_none) => (MPI_UNDEFINED, MpiStatus::EMPTY, None),
        None => {
            // SAFETY: the caller's contract.
            unsafe {
                put(flag, 0);
                put(index, MPI_UNDEFINED);
            }
            return MPI_SUCCESS;
        }
        Some(i) => {
            let Some(s) = &rs[i] else {
                return MPI_ERR_INTERN;
            };
            let comm = comm_of(s);
            // SAFETY: i < count.
            let st = collect(unsafe { &mut *reqs.add(i) }, s);
            (i as c_int, st, Some(comm))
        }
    };
    // SAFETY: the caller's contract.
    unsafe {
        put(flag, 1);
        put(index, i);
        put_status(status, st);
    }
    comm.map_or(MPI_SUCCESS, |c| report(call, c, &st))
}

/// # Safety
/// `reqs` holds `count` handles; `index` valid for a write; `status` null or valid.
#[unsafe(export_name = "PMPI_Waitany")]
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    reqs: *mut Raw,
    index: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    const CALL: &str = "MPI_Waitany";
    // SAFETY: the caller's contract.
    let rs = tri!(unsafe { read(CALL, count, reqs) });
    let done = rs.iter().any(Option::is_some).then(|| wait_any(&rs));
    // SAFETY: the caller's contract.
    unsafe { finish_any(CALL, &rs, done, reqs, index, std::ptr::null_mut(), status) }
}

/// # Safety
/// As `MPI_Waitany`; `flag` valid for a write.
#[unsafe(export_name = "PMPI_Testany")]
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    reqs: *mut Raw,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    const CALL: &str = "MPI_Testany";
    // SAFETY: the caller's contract.
    let rs = tri!(unsafe { read(CALL, count, reqs) });
    let done = any_done(&rs);
    // SAFETY: the caller's contract.
    unsafe { finish_any(CALL, &rs, done, reqs, index, flag, status) }
}

/// Collects every done request of `rs`: how many (`MPI_UNDEFINED` if none is active).
///
/// # Safety
/// As `MPI_Testsome`.
unsafe fn some(
    call: &str,
    rs: &[Option<Shared>],
    reqs: *mut Raw,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    if rs.iter().all(Option::is_none) {
        // SAFETY: the caller's contract.
        unsafe { put(outcount, MPI_UNDEFINED) };
        return MPI_SUCCESS;
    }
    let mut n = 0usize;
    let mut failed = None;
    for (i, r) in rs.iter().enumerate() {
        let Some(s) = r else { continue };
        if !poll(&mut s.lock().unwrap_or_else(|e| e.into_inner())) {
            continue;
        }
        let comm = comm_of(s);
        // SAFETY: i < count.
        let st = collect(unsafe { &mut *reqs.add(i) }, s);
        // SAFETY: the caller's contract: n < count entries.
        unsafe {
            put(indices.add(n), i as c_int);
            if !statuses.is_null() {
                statuses.add(n).write(st);
            }
        }
        if st.error != MPI_SUCCESS && failed.is_none() {
            failed = Some((comm, st));
        }
        n += 1;
    }
    // SAFETY: the caller's contract.
    unsafe { put(outcount, n as c_int) };
    in_status(call, failed)
}

/// # Safety
/// `reqs`, `indices` and `statuses` (unless null) hold `count` entries.
#[unsafe(export_name = "PMPI_Testsome")]
pub unsafe extern "C" fn MPI_Testsome(
    count: c_int,
    reqs: *mut Raw,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    const CALL: &str = "MPI_Testsome";
    // SAFETY: the caller's contract.
    let rs = tri!(unsafe { read(CALL, count, reqs) });
    if let Ok(p) = p2p() {
        p.progress();
    }
    // SAFETY: the caller's contract.
    unsafe { some(CALL, &rs, reqs, outcount, indices, statuses) }
}

/// # Safety
/// As `MPI_Testsome`.
#[unsafe(export_name = "PMPI_Waitsome")]
pub unsafe extern "C" fn MPI_Waitsome(
    count: c_int,
    reqs: *mut Raw,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    const CALL: &str = "MPI_Waitsome";
    // SAFETY: the caller's contract.
    let rs = tri!(unsafe { read(CALL, count, reqs) });
    if rs.iter().any(Option::is_some) {
        wait_any(&rs);
    }
    // SAFETY: the caller's contract.
    unsafe { some(CALL, &rs, reqs, outcount, indices, statuses) }
}

// ---- the rest -------------------------------------------------------------------------

/// # Safety
/// `request` valid for reads and writes.
#[unsafe(export_name = "PMPI_Request_free")]
pub unsafe extern "C" fn MPI_Request_free(request: *mut Raw) -> c_int {
    const CALL: &str = "MPI_Request_free";
    if request.is_null() {
        return fail(MPI_COMM_WORLD, MPI_ERR_ARG, format!("{CALL}: null pointer"));
    }
    // SAFETY: non-null, valid by contract.
    let h = unsafe { *request };
    let Some(s) = find(h) else {
        return bad_request(CALL, h);
    };
    remove(h);
    let mut r = s.lock().unwrap_or_else(|e| e.into_inner());
    match std::mem::replace(&mut r.body, Body::Inactive) {
        Body::P2p {
            id,
            send_stage,
            unpack,
            ..
        } => {
            // The operation completes in the background: its buffers must outlive it.
            if let Ok(p) = p2p() {
                p.free_raw(id);
            }
            std::mem::forget(send_stage);
            std::mem::forget(unpack);
        }
        Body::Op(op) => {
            // A collective in flight cannot be abandoned; its peers need its messages.
            DETACHED.lock().unwrap_or_else(|e| e.into_inner()).push(op);
        }
        Body::Greq(g) => g.release(),
        Body::Done(_) | Body::Inactive => {}
    }
    // SAFETY: as above.
    unsafe { *request = MPI_REQUEST_NULL };
    MPI_SUCCESS
}

/// Operations whose requests were freed while in flight, driven until done.
static DETACHED: Mutex<Vec<Box<dyn Operation>>> = Mutex::new(Vec::new());

/// Drives the detached operations once.
pub(crate) fn progress_detached() {
    let mut d = DETACHED.lock().unwrap_or_else(|e| e.into_inner());
    d.retain_mut(|op| op.progress().is_none());
}

/// # Safety
/// `flag` valid for a write; `status` null or valid.
#[unsafe(export_name = "PMPI_Request_get_status")]
pub unsafe extern "C" fn MPI_Request_get_status(
    request: Raw,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    if request == MPI_REQUEST_NULL {
        // SAFETY: the caller's contract.
        unsafe {
            put(flag, 1);
            put_status(status, MpiStatus::EMPTY);
        }
        return MPI_SUCCESS;
    }
    let Some(s) = find(request) else {
        return bad_request("MPI_Request_get_status", request);
    };
    let mut r = s.lock().unwrap_or_else(|e| e.into_inner());
    let done = poll(&mut r);
    let st = match &r.body {
        Body::Done(st) => *st,
        _ => MpiStatus::EMPTY,
    };
    // SAFETY: the caller's contract.
    unsafe {
        put(flag, c_int::from(done));
        if done {
            put_status(status, st);
        }
    }
    MPI_SUCCESS
}

/// Cancels a receive nothing has matched yet. Sends are not cancelled (the standard
/// allows that: `MPI_Test_cancelled` then says false).
///
/// # Safety
/// `request` valid for a read.
#[unsafe(export_name = "PMPI_Cancel")]
pub unsafe extern "C" fn MPI_Cancel(request: *mut Raw) -> c_int {
    if request.is_null() {
        return fail(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Cancel: null pointer");
    }
    // SAFETY: non-null, valid by contract.
    let h = unsafe { *request };
    let Some(s) = find(h) else {
        return bad_request("MPI_Cancel", h);
    };
    let r = s.lock().unwrap_or_else(|e| e.into_inner());
    match &r.body {
        Body::P2p { id, recv: true, .. } => {
            if let Ok(p) = p2p() {
                p.cancel_raw(*id);
            }
        }
        Body::Greq(g) => {
            if let Some(c) = g.cancel {
                // SAFETY: the program's function with its own state.
                unsafe { c(g.extra, c_int::from(g.done)) };
            }
        }
        _ => {}
    }
    MPI_SUCCESS
}

/// A request the program completes itself; its functions give the status, free and
/// cancel it.
///
/// # Safety
/// Functions of the standard's types (or null); `request` valid for a write.
#[unsafe(export_name = "PMPI_Grequest_start")]
pub unsafe extern "C" fn MPI_Grequest_start(
    query_fn: Option<QueryFn>,
    free_fn: Option<FreeFn>,
    cancel_fn: Option<CancelFn>,
    extra_state: *mut c_void,
    request: *mut Raw,
) -> c_int {
    let g = Greq {
        done: false,
        query: query_fn,
        free: free_fn,
        cancel: cancel_fn,
        extra: extra_state,
    };
    // SAFETY: the caller's contract.
    unsafe { put(request, insert(Body::Greq(g), None, MPI_COMM_WORLD)) };
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Grequest_complete")]
pub extern "C" fn MPI_Grequest_complete(request: Raw) -> c_int {
    let Some(s) = find(request) else {
        return bad_request("MPI_Grequest_complete", request);
    };
    let mut r = s.lock().unwrap_or_else(|e| e.into_inner());
    match &mut r.body {
        Body::Greq(g) => {
            g.done = true;
            MPI_SUCCESS
        }
        _ => {
            drop(r);
            fail(
                MPI_COMM_WORLD,
                MPI_ERR_REQUEST,
                "MPI_Grequest_complete: not a generalized request",
            )
        }
    }
}

/// # Safety
/// `status` valid for a read; `flag` for a write.
#[unsafe(export_name = "PMPI_Test_cancelled")]
pub unsafe extern "C" fn MPI_Test_cancelled(status: *const MpiStatus, flag: *mut c_int) -> c_int {
    if status.is_null() {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            "MPI_Test_cancelled: null status",
        );
    }
    // SAFETY: non-null, valid by contract.
    let c = unsafe { (*status).cancelled() };
    // SAFETY: the caller's contract.
    unsafe { put(flag, c_int::from(c)) };
    MPI_SUCCESS
}

/// # Safety
/// `status` valid for reads and writes.
#[unsafe(export_name = "PMPI_Status_set_cancelled")]
pub unsafe extern "C" fn MPI_Status_set_cancelled(status: *mut MpiStatus, flag: c_int) -> c_int {
    if status.is_null() {
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            "MPI_Status_set_cancelled: null status",
        );
    }
    // SAFETY: non-null, valid by contract.
    unsafe { (*status).set_cancelled(flag != 0) };
    MPI_SUCCESS
}

/// Starts persistent request `h`.
fn start(call: &str, h: Raw) -> c_int {
    let Some(s) = find(h) else {
        return bad_request(call, h);
    };
    let mut r = s.lock().unwrap_or_else(|e| e.into_inner());
    let comm = r.comm_h;
    if !matches!(r.body, Body::Inactive) {
        drop(r);
        return fail(
            comm,
            MPI_ERR_REQUEST,
            format!("{call}: the request is active or not persistent"),
        );
    }
    let Some(starter) = &r.persistent else {
        drop(r);
        return fail(
            comm,
            MPI_ERR_REQUEST,
            format!("{call}: the request is not persistent"),
        );
    };
    match starter() {
        Ok(b) => {
            r.body = b;
            MPI_SUCCESS
        }
        Err(e) => e,
    }
}

/// # Safety
/// `request` valid for a read.
#[unsafe(export_name = "PMPI_Start")]
pub unsafe extern "C" fn MPI_Start(request: *mut Raw) -> c_int {
    if request.is_null() {
        return fail(MPI_COMM_WORLD, MPI_ERR_ARG, "MPI_Start: null pointer");
    }
    // SAFETY: non-null, valid by contract.
    start("MPI_Start", unsafe { *request })
}

/// # Safety
/// `reqs` holds `count` handles.
#[unsafe(export_name = "PMPI_Startall")]
pub unsafe extern "C" fn MPI_Startall(count: c_int, reqs: *mut Raw) -> c_int {
    for i in 0..count.max(0) as usize {
        // SAFETY: i < count, by contract.
        let rc = start("MPI_Startall", unsafe { *reqs.add(i) });
        if rc != MPI_SUCCESS {
            return rc;
        }
    }
    MPI_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_keeps_a_64_bit_count_and_the_cancelled_flag() {
        let mut s = MpiStatus::new(1, 2, 0, (5i64 << 32) + 7);
        assert_eq!(s.bytes(), (5i64 << 32) + 7);
        assert!(!s.cancelled());
        s.set_cancelled(true);
        assert!(s.cancelled());
        assert_eq!(std::mem::size_of::<MpiStatus>(), 32);
    }
}
