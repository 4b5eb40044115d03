//! `bulkwire.h`: the point-to-point API for C, over [`bulkwire_p2p::Comm`]'s raw entry
//! points. One communicator per process (the world), created by `bw_init` and ended by
//! `bw_finalize`. Every function returns an error code; nothing unwinds into C.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_double, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Instant;

use bulkwire_p2p::{Comm, Error, ReqId, Source, Status, Tag};

pub const BW_SUCCESS: c_int = 0;
pub const BW_ERR_TRUNCATE: c_int = 1;
pub const BW_ERR_PEER_DEAD: c_int = 2;
pub const BW_ERR_JOB_FAILED: c_int = 3;
pub const BW_ERR_RANK: c_int = 4;
pub const BW_ERR_TAG: c_int = 5;
pub const BW_ERR_REQUEST: c_int = 6;
pub const BW_ERR_ARG: c_int = 7;
pub const BW_ERR_NOT_INITIALIZED: c_int = 8;
pub const BW_ERR_INIT: c_int = 9;
pub const BW_ERR_TRANSPORT: c_int = 10;
pub const BW_ERR_IN_STATUS: c_int = 11;
pub const BW_ERR_CANCELLED: c_int = 12;
pub const BW_ERR_OTHER: c_int = 13;

pub const BW_ANY_SOURCE: c_int = -1;
pub const BW_ANY_TAG: c_int = -1;
pub const BW_UNDEFINED: c_int = -32766;

/// `bw_request`: 0 is inactive; otherwise a p2p request id (never 0).
pub type BwRequest = u64;

/// `bw_status`, laid out as in `bulkwire.h`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BwStatus {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    pub count: usize,
}

/// The process's communicator, leaked by `bw_init` and reclaimed by `bw_finalize`. Calls
/// racing with `bw_finalize` are excluded by the API's contract (as in MPI), so a plain
/// pointer read is all a call pays.
static COMM: AtomicPtr<Comm> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises init and finalize.
static LIFECYCLE: Mutex<()> = Mutex::new(());

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_last(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

pub(crate) fn code_of(e: &Error) -> c_int {
    match e {
        Error::Truncated { .. } => BW_ERR_TRUNCATE,
        Error::PeerDead(_) => BW_ERR_PEER_DEAD,
        Error::JobFailed { .. } => BW_ERR_JOB_FAILED,
        Error::InvalidRank { .. } => BW_ERR_RANK,
        Error::InvalidTag(_) => BW_ERR_TAG,
        Error::InvalidRequest => BW_ERR_REQUEST,
        Error::Cancelled => BW_ERR_CANCELLED,
        Error::Init(_) | Error::Config(_) => BW_ERR_INIT,
        Error::Finalized => BW_ERR_NOT_INITIALIZED,
        Error::Transport(_) | Error::TooLarge { .. } => BW_ERR_TRANSPORT,
    }
}

/// Records `e` as this thread's last error and returns its code.
fn fail(e: &Error) -> c_int {
    set_last(&e.to_string());
    code_of(e)
}

pub(crate) fn comm() -> Result<&'static Comm, c_int> {
    let p = COMM.load(Ordering::Acquire);
    if p.is_null() {
        set_last("bulkwire is not initialised (call bw_init first)");
        return Err(BW_ERR_NOT_INITIALIZED);
    }
    // SAFETY: set from a leaked Box by bw_init and reclaimed only by bw_finalize, which
    // the caller must not race with other calls.
    Ok(unsafe { &*p })
}

/// Runs an entry point: errors as codes, panics caught (never unwound into C).
pub(crate) fn ffi(f: impl FnOnce() -> Result<c_int, c_int>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(c)) | Ok(Err(c)) => c,
        Err(_) => {
            set_last("internal error (a panic in bulkwire)");
            BW_ERR_OTHER
        }
    }
}

fn to_source(s: c_int) -> Result<Source, c_int> {
    match s {
        BW_ANY_SOURCE => Ok(Source::Any),
        s if s >= 0 => Ok(Source::Rank(s as u32)),
        s => Err(fail(&Error::InvalidRank {
            rank: s.into(),
            size: comm().map_or(0, |c| c.size()),
        })),
    }
}

fn to_tag(t: c_int) -> Tag {
    if t == BW_ANY_TAG {
        Tag::Any
    } else {
        Tag::Is(t)
    }
}

fn to_dest(d: c_int) -> Result<u32, c_int> {
    if d < 0 {
        return Err(fail(&Error::InvalidRank {
            rank: d.into(),
            size: comm().map_or(0, |c| c.size()),
        }));
    }
    Ok(d as u32)
}

fn check_buf(buf: *const c_void, count: usize) -> Result<(), c_int> {
    if buf.is_null() && count > 0 {
        set_last("null buffer with a nonzero count");
        return Err(BW_ERR_ARG);
    }
    Ok(())
}

/// Fills `st` (if not null) from an outcome and returns the outcome's code.
///
/// # Safety
/// `st` is null or valid for a write of a `BwStatus`.
unsafe fn put_status(st: *mut BwStatus, r: &Result<Status, Error>) -> c_int {
    let (s, code) = match r {
        Ok(s) => (
            BwStatus {
                source: s.source as c_int,
                tag: s.tag,
                error: BW_SUCCESS,
                count: s.len,
            },
            BW_SUCCESS,
        ),
        Err(e) => {
            let code = fail(e);
            let (source, tag, count) = match *e {
                Error::Truncated { peer, tag, len, .. } => (
                    peer as c_int,
                    tag,
                    usize::try_from(len).unwrap_or(usize::MAX),
                ),
                _ => (e.peer().map_or(-1, |p| p as c_int), -1, 0),
            };
            (
                BwStatus {
                    source,
                    tag,
                    error: code,
                    count,
                },
                code,
            )
        }
    };
    if !st.is_null() {
        // SAFETY: non-null, valid for writes by the caller's contract.
        unsafe { st.write(s) };
    }
    code
}

/// The empty status of an inactive request.
const EMPTY: BwStatus = BwStatus {
    source: BW_ANY_SOURCE,
    tag: BW_ANY_TAG,
    error: BW_SUCCESS,
    count: 0,
};

/// # Safety
/// `st` is null or valid for a write.
unsafe fn put_empty(st: *mut BwStatus) {
    if !st.is_null() {
        // SAFETY: non-null, valid for writes by the caller's contract.
        unsafe { st.write(EMPTY) };
    }
}

/// Reads `count` request handles.
///
/// # Safety
/// `reqs` valid for `count` reads when `count > 0`.
unsafe fn read_reqs(count: c_int, reqs: *const BwRequest) -> Result<Vec<Option<ReqId>>, c_int> {
    if count < 0 || (count > 0 && reqs.is_null()) {
        set_last("bad request array");
        return Err(BW_ERR_ARG);
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: count > 0 handles at a non-null pointer, by the caller's contract.
    let s = unsafe { std::slice::from_raw_parts(reqs, count as usize) };
    Ok(s.iter().map(|&r| (r != 0).then_some(r)).collect())
}

/// Joins the launched job, or starts one of `n` processes.
fn start(n: u32) -> c_int {
    ffi(|| {
        let _g = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
        if !COMM.load(Ordering::Acquire).is_null() {
            set_last("bulkwire is already initialised");
            return Err(BW_ERR_INIT);
        }
        let s = crate::settings::get().map_err(|e| {
            set_last(e);
            BW_ERR_INIT
        })?;
        let c = Comm::init_spawn(n, &s.launch, s.p2p.clone()).map_err(|e| fail(&e))?;
        COMM.store(Box::into_raw(Box::new(c)), Ordering::Release);
        Ok(BW_SUCCESS)
    })
}

/// Joins the job this process was launched in, or makes a job of one.
#[unsafe(no_mangle)]
pub extern "C" fn bw_init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
    start(1)
}

/// Joins the launched job, or starts `nprocs` copies of this program (self-spawn).
#[unsafe(no_mangle)]
pub extern "C" fn bw_init_spawn(nprocs: c_int) -> c_int {
    if nprocs < 1 {
        set_last("bw_init_spawn: nprocs must be at least 1");
        return BW_ERR_ARG;
    }
    start(nprocs as u32)
}

/// # Safety
/// `flag` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_initialized(flag: *mut c_int) -> c_int {
    if flag.is_null() {
        return BW_ERR_ARG;
    }
    // SAFETY: non-null, valid for writes by contract.
    unsafe { flag.write(c_int::from(!COMM.load(Ordering::Acquire).is_null())) };
    BW_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn bw_finalize() -> c_int {
    ffi(|| {
        let _g = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
        let p = COMM.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if p.is_null() {
            set_last("bulkwire is not initialised");
            return Err(BW_ERR_NOT_INITIALIZED);
        }
        // The collectives borrow the communicator: they go first.
        crate::coll::release();
        // SAFETY: p came from Box::into_raw in start() and was just taken out of COMM.
        let c = unsafe { Box::from_raw(p) };
        c.finalize().map(|()| BW_SUCCESS).map_err(|e| fail(&e))
    })
}

/// # Safety
/// `message` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_abort(message: *const c_char) {
    let msg = if message.is_null() {
        "bw_abort".to_string()
    } else {
        // SAFETY: a NUL-terminated string by contract.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    };
    match comm() {
        Ok(c) => c.abort(&msg),
        Err(_) => {
            bulkwire_bsp::say(&format!("bw_abort: {msg}"));
            std::process::exit(1)
        }
    }
}

/// # Safety
/// `rank` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_rank(rank: *mut c_int) -> c_int {
    ffi(|| {
        let c = comm()?;
        if rank.is_null() {
            return Err(BW_ERR_ARG);
        }
        // SAFETY: non-null, valid for writes by contract.
        unsafe { rank.write(c.rank() as c_int) };
        Ok(BW_SUCCESS)
    })
}

/// # Safety
/// `size` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_size(size: *mut c_int) -> c_int {
    ffi(|| {
        let c = comm()?;
        if size.is_null() {
            return Err(BW_ERR_ARG);
        }
        // SAFETY: non-null, valid for writes by contract.
        unsafe { size.write(c.size() as c_int) };
        Ok(BW_SUCCESS)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn bw_wtime() -> c_double {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// # Safety
/// `buf` valid for reads of `count` bytes, unmodified until the request completes;
/// `request` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_isend(
    buf: *const c_void,
    count: usize,
    dest: c_int,
    tag: c_int,
    request: *mut BwRequest,
) -> c_int {
    ffi(|| {
        let c = comm()?;
        check_buf(buf, count)?;
        if request.is_null() {
            return Err(BW_ERR_ARG);
        }
        // SAFETY: forwarded contract on buf.
        let id =
            unsafe { c.isend_raw(to_dest(dest)?, tag, buf.cast(), count) }.map_err(|e| fail(&e))?;
        // SAFETY: non-null, valid for writes by contract.
        unsafe { request.write(id) };
        Ok(BW_SUCCESS)
    })
}

/// # Safety
/// `buf` valid for writes of `count` bytes, untouched until the request completes;
/// `request` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_irecv(
    buf: *mut c_void,
    count: usize,
    source: c_int,
    tag: c_int,
    request: *mut BwRequest,
) -> c_int {
    ffi(|| {
        let c = comm()?;
        check_buf(buf, count)?;
        if request.is_null() {
            return Err(BW_ERR_ARG);
        }
        // SAFETY: forwarded contract on buf.
        let id = unsafe { c.irecv_raw(to_source(source)?, to_tag(tag), buf.cast(), count) }
            .map_err(|e| fail(&e))?;
        // SAFETY: non-null, valid for writes by contract.
        unsafe { request.write(id) };
        Ok(BW_SUCCESS)
    })
}

/// # Safety
/// `buf` valid for reads of `count` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_send(
    buf: *const c_void,
    count: usize,
    dest: c_int,
    tag: c_int,
) -> c_int {
    ffi(|| {
        let c = comm()?;
        check_buf(buf, count)?;
        // SAFETY: forwarded contract; the call completes the request before returning.
        unsafe { c.send_raw(to_dest(dest)?, tag, buf.cast(), count) }
            .map(|_| BW_SUCCESS)
            .map_err(|e| fail(&e))
    })
}

/// # Safety
/// `buf` valid for writes of `count` bytes; `status` null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_recv(
    buf: *mut c_void,
    count: usize,
    source: c_int,
    tag: c_int,
    status: *mut BwStatus,
) -> c_int {
    ffi(|| {
        let c = comm()?;
        check_buf(buf, count)?;
        // SAFETY: forwarded contract; the call completes the request before returning.
        let r = unsafe { c.recv_raw(to_source(source)?, to_tag(tag), buf.cast(), count) };
        // SAFETY: status is null or valid, by contract.
        Ok(unsafe { put_status(status, &r) })
    })
}

/// # Safety
/// `request` valid for a read and a write; `status` null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_wait(request: *mut BwRequest, status: *mut BwStatus) -> c_int {
    ffi(|| {
        let c = comm()?;
        if request.is_null() {
            return Err(BW_ERR_ARG);
        }
        // SAFETY: non-null, valid by contract.
        let id = unsafe { request.read() };
        if id == 0 {
            // SAFETY: status null or valid by contract.
            unsafe { put_empty(status) };
            return Ok(BW_SUCCESS);
        }
        let r = c.wait_raw(id);
        // SAFETY: as above.
        unsafe { request.write(0) };
        // SAFETY: status null or valid by contract.
        Ok(unsafe { put_status(status, &r) })
    })
}

/// # Safety
/// `request` valid for a read and a write, `flag` for a write; `status` null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_test(
    request: *mut BwRequest,
    flag: *mut c_int,
    status: *mut BwStatus,
) -> c_int {
    ffi(|| {
        let c = comm()?;
        if request.is_null() || flag.is_null() {
            return Err(BW_ERR_ARG);
        }
        // SAFETY: non-null, valid by contract.
        let id = unsafe { request.read() };
        if id == 0 {
            // SAFETY: valid by contract.
            unsafe {
                flag.write(1);
                put_empty(status);
            }
            return Ok(BW_SUCCESS);
        }
        match c.test_raw(id) {
            Some(r) => {
                // SAFETY: valid by contract.
                unsafe {
                    request.write(0);
                    flag.write(1);
                    Ok(put_status(status, &r))
                }
            }
            None => {
                // SAFETY: valid by contract.
                unsafe { flag.write(0) };
                Ok(BW_SUCCESS)
            }
        }
    })
}

/// Writes the outcomes of a completed set of requests.
///
/// # Safety
/// `reqs` valid for writes of `outs.len()` handles; `statuses` null or valid for as many.
unsafe fn finish_all(
    reqs: *mut BwRequest,
    statuses: *mut BwStatus,
    outs: &[Option<Result<Status, Error>>],
) -> c_int {
    let mut code = BW_SUCCESS;
    for (i, o) in outs.iter().enumerate() {
        let st = if statuses.is_null() {
            std::ptr::null_mut()
        } else {
            // SAFETY: i < count, valid by contract.
            unsafe { statuses.add(i) }
        };
        match o {
            None => {
                // SAFETY: as above.
                unsafe { put_empty(st) }
            }
            Some(r) => {
                // SAFETY: as above.
                unsafe { reqs.add(i).write(0) };
                // SAFETY: as above.
                if unsafe { put_status(st, r) } != BW_SUCCESS && code == BW_SUCCESS {
                    code = BW_ERR_IN_STATUS;
                }
            }
        }
    }
    code
}

/// # Safety
/// `requests` valid for `count` reads and writes; `statuses` null or valid for `count`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_waitall(
    count: c_int,
    requests: *mut BwRequest,
    statuses: *mut BwStatus,
) -> c_int {
    ffi(|| {
        let c = comm()?;
        // SAFETY: forwarded contract.
        let ids = unsafe { read_reqs(count, requests) }?;
        let outs = c.wait_all_raw(&ids);
        // SAFETY: forwarded contract.
        Ok(unsafe { finish_all(requests, statuses, &outs) })
    })
}

/// # Safety
/// As [`bw_waitall`]; `flag` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_testall(
    count: c_int,
    requests: *mut BwRequest,
    flag: *mut c_int,
    statuses: *mut BwStatus,
) -> c_int {
    ffi(|| {
        let c = comm()?;
        if flag.is_null() {
            return Err(BW_ERR_ARG);
        }
        // SAFETY: forwarded contract.
        let ids = unsafe { read_reqs(count, requests) }?;
        match c.test_all_raw(&ids) {
            Some(outs) => {
                // SAFETY: valid by contract.
                unsafe { flag.write(1) };
                // SAFETY: forwarded contract.
                Ok(unsafe { finish_all(requests, statuses, &outs) })
            }
            None => {
                // SAFETY: valid by contract.
                unsafe { flag.write(0) };
                Ok(BW_SUCCESS)
            }
        }
    })
}

/// # Safety
/// `requests` valid for `count` reads and writes; `index` for a write; `status` null or
/// valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_waitany(
    count: c_int,
    requests: *mut BwRequest,
    index: *mut c_int,
    status: *mut BwStatus,
) -> c_int {
    ffi(|| {
        let c = comm()?;
        if index.is_null() {
            return Err(BW_ERR_ARG);
        }
        // SAFETY: forwarded contract.
        let ids = unsafe { read_reqs(count, requests) }?;
        match c.wait_any_raw(&ids) {
            Some((i, r)) => {
                // SAFETY: i < count; valid by contract.
                unsafe {
                    requests.add(i).write(0);
                    index.write(i as c_int);
                    Ok(put_status(status, &r))
                }
            }
            None => {
                // SAFETY: valid by contract.
                unsafe {
                    index.write(BW_UNDEFINED);
                    put_empty(status);
                }
                Ok(BW_SUCCESS)
            }
        }
    })
}

/// # Safety
/// As [`bw_waitany`]; `flag` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_testany(
    count: c_int,
    requests: *mut BwRequest,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut BwStatus,
) -> c_int {
    ffi(|| {
        let c = comm()?;
        if index.is_null() || flag.is_null() {
            return Err(BW_ERR_ARG);
        }
        // SAFETY: forwarded contract.
        let ids = unsafe { read_reqs(count, requests) }?;
        match c.test_any_raw(&ids) {
            Some((i, r)) => {
                // SAFETY: i < count; valid by contract.
                unsafe {
                    requests.add(i).write(0);
                    index.write(i as c_int);
                    flag.write(1);
                    Ok(put_status(status, &r))
                }
            }
            None => {
                // No active request counts as done (MPI's rule); otherwise not yet.
                let none = ids.iter().all(Option::is_none);
                // SAFETY: valid by contract.
                unsafe {
                    index.write(BW_UNDEFINED);
                    flag.write(c_int::from(none));
                    if none {
                        put_empty(status);
                    }
                }
                Ok(BW_SUCCESS)
            }
        }
    })
}

/// # Safety
/// `request` valid for a read and a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_request_free(request: *mut BwRequest) -> c_int {
    ffi(|| {
        let c = comm()?;
        if request.is_null() {
            return Err(BW_ERR_ARG);
        }
        // SAFETY: non-null, valid by contract.
        let id = unsafe { request.read() };
        if id != 0 {
            c.free_raw(id);
            // SAFETY: as above.
            unsafe { request.write(0) };
        }
        Ok(BW_SUCCESS)
    })
}

/// # Safety
/// `flag` valid for a write; `status` null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_iprobe(
    source: c_int,
    tag: c_int,
    flag: *mut c_int,
    status: *mut BwStatus,
) -> c_int {
    ffi(|| {
        let c = comm()?;
        if flag.is_null() {
            return Err(BW_ERR_ARG);
        }
        match c
            .iprobe(to_source(source)?, to_tag(tag))
            .map_err(|e| fail(&e))?
        {
            Some(st) => {
                // SAFETY: valid by contract.
                unsafe {
                    flag.write(1);
                    put_status(status, &Ok(st));
                }
            }
            // SAFETY: valid by contract.
            None => unsafe { flag.write(0) },
        }
        Ok(BW_SUCCESS)
    })
}

/// # Safety
/// `status` null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bw_probe(source: c_int, tag: c_int, status: *mut BwStatus) -> c_int {
    ffi(|| {
        let c = comm()?;
        let st = c
            .probe(to_source(source)?, to_tag(tag))
            .map_err(|e| fail(&e))?;
        // SAFETY: valid by contract.
        Ok(unsafe { put_status(status, &Ok(st)) })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn bw_error_string(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        BW_SUCCESS => c"success",
        BW_ERR_TRUNCATE => c"message truncated: longer than the receive buffer",
        BW_ERR_PEER_DEAD => c"the peer is dead (stopped answering)",
        BW_ERR_JOB_FAILED => c"the job failed (another process died or aborted)",
        BW_ERR_RANK => c"invalid rank",
        BW_ERR_TAG => c"invalid tag (tags are 0 to 2147483647)",
        BW_ERR_REQUEST => c"invalid request",
        BW_ERR_ARG => c"invalid argument",
        BW_ERR_NOT_INITIALIZED => c"bulkwire is not initialised",
        BW_ERR_INIT => c"cannot initialise bulkwire",
        BW_ERR_TRANSPORT => c"transport error",
        BW_ERR_IN_STATUS => c"error in a status (see each status's error)",
        BW_ERR_CANCELLED => c"request cancelled",
        BW_ERR_OTHER => c"internal error",
        _ => return crate::coll::error_string(code),
    };
    s.as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn bw_last_error() -> *const c_char {
    // The pointer stays valid until this thread's next error replaces the string.
    LAST.with(|l| l.borrow().as_ptr())
}
