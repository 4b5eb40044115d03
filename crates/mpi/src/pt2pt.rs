//! Point-to-point: sends in every mode (standard, synchronous, buffered, ready),
//! receives, probes (matched ones too), persistent requests, `MPI_Sendrecv*`, the buffer
//! of buffered sends, and `MPI_Get_count`/`MPI_Get_elements`.
//!
//! A message of communicator `c` with tag `t` is the p2p message `c.ctx << 16 | t` between
//! the world ranks of the two processes. Datatypes whose elements are their bytes go
//! straight from and to the user's buffer; others are packed into a buffer of the request
//! and unpacked when it completes. A synchronous send goes by p2p's rendezvous, which
//! completes only once the receiver has matched it; a ready send is a standard one.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::{Arc, Mutex};

use bulkwire_p2p::{ReqId, Source};

use crate::comm::{self, Communicator};
use crate::dt::{self, Datatype};
use crate::error::*;
use crate::group::{put, tri};
use crate::handle::{Kind, Raw, Ref, Table};
use crate::predef::*;
use crate::request::{self, Body, MpiStatus, Unpack, status_of};
use crate::runtime::{code_of, fail, p2p};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Standard,
    Sync,
    Buffered,
    Ready,
}

/// A checked send or receive: what the calls share.
struct Args {
    comm: Ref<Communicator>,
    comm_h: Raw,
    dt: Ref<Datatype>,
    buf: *mut u8,
    count: usize,
    /// World rank of the peer; `None`: `MPI_PROC_NULL` (or `MPI_ANY_SOURCE` for receives
    /// when `any` is set).
    peer: Option<u32>,
    any: bool,
    tag: c_int,
}

impl Args {
    fn bytes(&self) -> usize {
        self.count * self.dt.size()
    }

    /// The first byte of the data when the datatype is contiguous.
    fn start(&self) -> *mut u8 {
        self.buf.wrapping_offset(self.dt.true_lb())
    }
}

/// Checks the arguments every call takes. `recv`: the peer may be `MPI_ANY_SOURCE` and
/// the tag `MPI_ANY_TAG`.
#[allow(clippy::too_many_arguments)]
fn check(
    call: &str,
    buf: *const c_void,
    count: c_int,
    datatype: Raw,
    peer: c_int,
    tag: c_int,
    comm_h: Raw,
    recv: bool,
) -> Result<Args, c_int> {
    let comm = comm::get_ref(call, comm_h)?;
    if count < 0 {
        return Err(fail(
            comm_h,
            MPI_ERR_COUNT,
            format!("{call}: count {count} is negative"),
        ));
    }
    // Nothing moves to or from MPI_PROC_NULL: its datatype may be MPI_DATATYPE_NULL.
    let dt = match dt::lookup_ref(datatype) {
        Err(_) if peer == MPI_PROC_NULL && datatype == MPI_DATATYPE_NULL => dt::lookup_ref(0x247)?,
        r => r.map_err(|e| fail(comm_h, e, format!("{call}: invalid datatype {datatype:#x}")))?,
    };
    let any_tag = recv && tag == MPI_ANY_TAG;
    if !any_tag && !(0..=TAG_UB).contains(&tag) {
        return Err(fail(
            comm_h,
            MPI_ERR_TAG,
            format!("{call}: tag {tag} is outside 0..={TAG_UB}"),
        ));
    }
    let any = recv && peer == MPI_ANY_SOURCE;
    let world = if peer == MPI_PROC_NULL || any {
        None
    } else if peer < 0 || peer as u32 >= comm.peers().size() {
        let role = if recv { "source" } else { "destination" };
        return Err(fail(
            comm_h,
            MPI_ERR_RANK,
            format!(
                "{call}: {role} {peer} is outside the communicator (size {})",
                comm.peers().size()
            ),
        ));
    } else {
        Some(comm.peer_world(peer as u32))
    };
    Ok(Args {
        comm,
        comm_h,
        dt,
        buf: buf as *mut u8,
        count: count as usize,
        peer: world,
        any,
        tag,
    })
}

/// The status of a receive from `MPI_PROC_NULL`.
fn proc_null_status() -> MpiStatus {
    MpiStatus::new(MPI_PROC_NULL, MPI_ANY_TAG, MPI_SUCCESS, 0)
}

fn p2p_err(call: &str, comm_h: Raw, e: &bulkwire_p2p::Error) -> c_int {
    fail(comm_h, code_of(e), format!("{call}: {e}"))
}

// ---- buffered sends -------------------------------------------------------------------

struct Attached {
    ptr: usize,
    size: usize,
    /// Bytes of the buffer that sends in flight account for.
    used: usize,
    /// Sends in flight: the request, its data, the bytes accounted.
    pending: Vec<(ReqId, Vec<u8>, usize)>,
}

static ATTACHED: Mutex<Option<Attached>> = Mutex::new(None);

/// Forgets the buffered sends that have completed.
fn reap(a: &mut Attached) {
    let Ok(p) = p2p() else { return };
    let mut freed = 0;
    a.pending.retain(|(id, _, n)| match p.test_raw(*id) {
        None => true,
        Some(_) => {
            freed += n;
            false
        }
    });
    a.used -= freed;
}

/// Waits for every buffered send (`MPI_Buffer_detach`, `MPI_Finalize`).
pub(crate) fn drain_buffered() {
    let pending = {
        let mut g = ATTACHED.lock().unwrap_or_else(|e| e.into_inner());
        match g.as_mut() {
            Some(a) => {
                a.used = 0;
                std::mem::take(&mut a.pending)
            }
            None => return,
        }
    };
    if let Ok(p) = p2p() {
        for (id, _data, _) in pending {
            let _ = p.wait_raw(id);
        }
    }
}

/// # Safety
/// `buffer` valid for `size` bytes until detached.
#[unsafe(export_name = "PMPI_Buffer_attach")]
pub unsafe extern "C" fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    let mut g = ATTACHED.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_some() {
        drop(g);
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_BUFFER,
            "MPI_Buffer_attach: a buffer is already attached",
        );
    }
    if size < 0 {
        drop(g);
        return fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            format!("MPI_Buffer_attach: size {size}"),
        );
    }
    *g = Some(Attached {
        ptr: buffer as usize,
        size: size as usize,
        used: 0,
        pending: Vec::new(),
    });
    MPI_SUCCESS
}

/// Waits for the buffered sends, then hands the buffer back.
///
/// # Safety
/// `buffer_addr` points to a `void *` to write; `size` valid for a write.
#[unsafe(export_name = "PMPI_Buffer_detach")]
pub unsafe extern "C" fn MPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    drain_buffered();
    let a = ATTACHED.lock().unwrap_or_else(|e| e.into_inner()).take();
    let (ptr, n) = a.map_or((0, 0), |a| (a.ptr, a.size));
    // SAFETY: the caller's contract.
    unsafe {
        put(buffer_addr.cast::<usize>(), ptr);
        put(size, n as c_int);
    }
    MPI_SUCCESS
}

/// Packs the message into space accounted against the attached buffer and sends it in
/// the background.
fn bsend(call: &str, a: &Args) -> Result<(), c_int> {
    let Some(dest) = a.peer else { return Ok(()) };
    let mut data = Vec::with_capacity(a.bytes());
    // SAFETY: the user's buffer holds `count` elements by the call's contract.
    unsafe { a.dt.pack(a.buf, a.count, &mut data) };
    let need = data.len() + MPI_BSEND_OVERHEAD;
    let mut g = ATTACHED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(att) = g.as_mut() else {
        drop(g);
        return Err(fail(
            a.comm_h,
            MPI_ERR_BUFFER,
            format!("{call}: no buffer is attached"),
        ));
    };
    reap(att);
    if att.used + need > att.size {
        let (used, size) = (att.used, att.size);
        drop(g);
        return Err(fail(
            a.comm_h,
            MPI_ERR_BUFFER,
            format!(
                "{call}: {need} bytes do not fit the attached buffer ({used} of {size} bytes in use)"
            ),
        ));
    }
    let p = p2p()?;
    // SAFETY: `data` moves into the pending list with the request; a Vec's heap buffer
    // does not move with it.
    let id = unsafe { p.isend_raw(dest, a.comm.wire_tag(a.tag), data.as_ptr(), data.len()) };
    let id = match id {
        Ok(id) => id,
        Err(e) => {
            drop(g);
            return Err(p2p_err(call, a.comm_h, &e));
        }
    };
    att.used += need;
    att.pending.push((id, data, need));
    Ok(())
}

// ---- starting sends and receives ------------------------------------------------------

/// Starts a send: its request body.
fn start_send(call: &str, a: &Args, mode: Mode) -> Result<Body, c_int> {
    if mode == Mode::Buffered {
        bsend(call, a)?;
        return Ok(Body::Done(MpiStatus::EMPTY));
    }
    let Some(dest) = a.peer else {
        return Ok(Body::Done(MpiStatus::EMPTY));
    };
    let p = p2p()?;
    let tag = a.comm.wire_tag(a.tag);
    let (ptr, len, stage) = if a.dt.contiguous() {
        (a.start() as *const u8, a.bytes(), None)
    } else {
        let mut v = Vec::with_capacity(a.bytes());
        // SAFETY: the user's buffer holds `count` elements by the call's contract.
        unsafe { a.dt.pack(a.buf, a.count, &mut v) };
        (v.as_ptr(), v.len(), Some(v))
    };
    // SAFETY: the user's buffer (or the stage, kept in the body) stays valid and
    // unmodified until the request completes, by MPI's rules.
    let id = unsafe {
        if mode == Mode::Sync {
            p.issend_raw(dest, tag, ptr, len)
        } else {
            p.isend_raw(dest, tag, ptr, len)
        }
    }
    .map_err(|e| p2p_err(call, a.comm_h, &e))?;
    Ok(Body::P2p {
        id,
        comm: a.comm.arc(),
        recv: false,
        send_stage: stage,
        unpack: None,
    })
}

fn source(a: &Args) -> Source {
    match a.peer {
        Some(w) if !a.any => Source::Rank(w),
        _ => Source::Any,
    }
}

/// Starts a receive: its request body.
fn start_recv(call: &str, a: &Args) -> Result<Body, c_int> {
    if a.peer.is_none() && !a.any {
        return Ok(Body::Done(proc_null_status()));
    }
    let p = p2p()?;
    let sel = a.comm.tag_sel(a.tag);
    let (ptr, cap, unpack) = if a.dt.contiguous() {
        (a.start(), a.bytes(), None)
    } else {
        let mut v = vec![0u8; a.bytes()];
        let ptr = v.as_mut_ptr();
        let u = Unpack {
            data: v,
            buf: a.buf,
            count: a.count,
            dt: a.dt.arc(),
        };
        (ptr, a.bytes(), Some(u))
    };
    // SAFETY: the user's buffer (or the stage, kept in the body) is valid for `cap`
    // bytes until the request completes, by MPI's rules.
    let id = unsafe { p.irecv_raw(source(a), sel, ptr, cap) }
        .map_err(|e| p2p_err(call, a.comm_h, &e))?;
    Ok(Body::P2p {
        id,
        comm: a.comm.arc(),
        recv: true,
        send_stage: None,
        unpack,
    })
}

// ---- the calls ------------------------------------------------------------------------

macro_rules! send_fns {
    ($($blocking:ident $nonblocking:ident $init:ident $mode:expr),* $(,)?) => {$(
        /// # Safety
        /// `buf` holds `count` elements of `datatype`.
        #[unsafe(export_name = concat!("P", stringify!($blocking)))]
        pub unsafe extern "C" fn $blocking(
            buf: *const c_void,
            count: c_int,
            datatype: Raw,
            dest: c_int,
            tag: c_int,
            comm: Raw,
        ) -> c_int {
            const CALL: &str = stringify!($blocking);
            let a = tri!(check(CALL, buf, count, datatype, dest, tag, comm, false));
            blocking_send(CALL, &a, $mode)
        }

        /// # Safety
        /// `buf` holds `count` elements of `datatype` until the request completes;
        /// `request` valid for a write.
        #[unsafe(export_name = concat!("P", stringify!($nonblocking)))]
        pub unsafe extern "C" fn $nonblocking(
            buf: *const c_void,
            count: c_int,
            datatype: Raw,
            dest: c_int,
            tag: c_int,
            comm: Raw,
            request: *mut Raw,
        ) -> c_int {
            const CALL: &str = stringify!($nonblocking);
            let a = tri!(check(CALL, buf, count, datatype, dest, tag, comm, false));
            let body = tri!(start_send(CALL, &a, $mode));
            // SAFETY: the caller's contract.
            unsafe { put(request, request::insert(body, None, comm)) };
            MPI_SUCCESS
        }

        /// # Safety
        /// As the non-blocking call, for every start.
        #[unsafe(export_name = concat!("P", stringify!($init)))]
        pub unsafe extern "C" fn $init(
            buf: *const c_void,
            count: c_int,
            datatype: Raw,
            dest: c_int,
            tag: c_int,
            comm: Raw,
            request: *mut Raw,
        ) -> c_int {
            const CALL: &str = stringify!($init);
            let a = tri!(check(CALL, buf, count, datatype, dest, tag, comm, false));
            let a = Persist(a);
            let starter: request::Starter = Box::new(move || start_send(CALL, a.args(), $mode));
            // SAFETY: the caller's contract.
            unsafe { put(request, request::insert(Body::Inactive, Some(starter), comm)) };
            MPI_SUCCESS
        }
    )*};
}

/// Arguments kept by a persistent request.
struct Persist(Args);
// SAFETY: the buffer pointer is the program's, valid while the request lives (MPI's
// rules); any thread may start the request.
unsafe impl Send for Persist {}

impl Persist {
    /// The arguments (a method, so that closures capture the whole `Persist`).
    fn args(&self) -> &Args {
        &self.0
    }
}

send_fns!(
    MPI_Send MPI_Isend MPI_Send_init Mode::Standard,
    MPI_Ssend MPI_Issend MPI_Ssend_init Mode::Sync,
    MPI_Bsend MPI_Ibsend MPI_Bsend_init Mode::Buffered,
    MPI_Rsend MPI_Irsend MPI_Rsend_init Mode::Ready,
);

/// A blocking send: contiguous standard sends take p2p's one-round path.
fn blocking_send(call: &str, a: &Args, mode: Mode) -> c_int {
    if matches!(mode, Mode::Standard | Mode::Ready) && a.dt.contiguous() {
        let Some(dest) = a.peer else {
            return MPI_SUCCESS;
        };
        let p = tri!(p2p());
        // SAFETY: the user's buffer holds the message for the call.
        return match unsafe { p.send_raw(dest, a.comm.wire_tag(a.tag), a.start(), a.bytes()) } {
            Ok(_) => MPI_SUCCESS,
            Err(e) => p2p_err(call, a.comm_h, &e),
        };
    }
    let body = tri!(start_send(call, a, mode));
    let st = request::wait_body(body, a.comm_h);
    if st.error != MPI_SUCCESS {
        return fail(a.comm_h, st.error, format!("{call}: {}", recv_problem(&st)));
    }
    MPI_SUCCESS
}

/// # Safety
/// `buf` holds `count` elements of `datatype`; `status` null or valid for a write.
#[unsafe(export_name = "PMPI_Recv")]
pub unsafe extern "C" fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    datatype: Raw,
    source: c_int,
    tag: c_int,
    comm: Raw,
    status: *mut MpiStatus,
) -> c_int {
    const CALL: &str = "MPI_Recv";
    let a = tri!(check(CALL, buf, count, datatype, source, tag, comm, true));
    let st = if a.dt.contiguous() && (a.peer.is_some() || a.any) {
        let p = tri!(p2p());
        // SAFETY: the user's buffer holds `count` elements for the call.
        let r = unsafe {
            p.recv_raw(
                self::source(&a),
                a.comm.tag_sel(a.tag),
                a.start(),
                a.bytes(),
            )
        };
        status_of(&a.comm, r)
    } else {
        let body = tri!(start_recv(CALL, &a));
        request::wait_body(body, comm)
    };
    // SAFETY: the caller's contract.
    unsafe { request::put_status(status, st) };
    if st.error != MPI_SUCCESS {
        return fail(comm, st.error, format!("{CALL}: {}", recv_problem(&st)));
    }
    MPI_SUCCESS
}

fn recv_problem(st: &MpiStatus) -> String {
    match st.error {
        MPI_ERR_TRUNCATE => format!(
            "a message from rank {} with tag {} is longer than the {} bytes of the receive buffer",
            st.source,
            st.tag,
            st.bytes()
        ),
        MPI_ERR_PROC_ABORTED => "the sending process died or the job failed".to_string(),
        e => format!("error class {e}"),
    }
}

/// # Safety
/// `buf` holds `count` elements of `datatype` until the request completes; `request`
/// valid for a write.
#[unsafe(export_name = "PMPI_Irecv")]
pub unsafe extern "C" fn MPI_Irecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Raw,
    source: c_int,
    tag: c_int,
    comm: Raw,
    request: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Irecv";
    let a = tri!(check(CALL, buf, count, datatype, source, tag, comm, true));
    let body = tri!(start_recv(CALL, &a));
    // SAFETY: the caller's contract.
    unsafe { put(request, request::insert(body, None, comm)) };
    MPI_SUCCESS
}

/// # Safety
/// As `MPI_Irecv`, for every start.
#[unsafe(export_name = "PMPI_Recv_init")]
pub unsafe extern "C" fn MPI_Recv_init(
    buf: *mut c_void,
    count: c_int,
    datatype: Raw,
    source: c_int,
    tag: c_int,
    comm: Raw,
    request: *mut Raw,
) -> c_int {
    const CALL: &str = "MPI_Recv_init";
    let a = Persist(tri!(check(
        CALL, buf, count, datatype, source, tag, comm, true
    )));
    let starter: request::Starter = Box::new(move || start_recv(CALL, a.args()));
    // SAFETY: the caller's contract.
    unsafe {
        put(
            request,
            request::insert(Body::Inactive, Some(starter), comm),
        )
    };
    MPI_SUCCESS
}

/// # Safety
/// Buffers as for `MPI_Send` and `MPI_Recv`.
#[unsafe(export_name = "PMPI_Sendrecv")]
pub unsafe extern "C" fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Raw,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Raw,
    source: c_int,
    recvtag: c_int,
    comm: Raw,
    status: *mut MpiStatus,
) -> c_int {
    const CALL: &str = "MPI_Sendrecv";
    let s = tri!(check(
        CALL, sendbuf, sendcount, sendtype, dest, sendtag, comm, false
    ));
    let r = tri!(check(
        CALL, recvbuf, recvcount, recvtype, source, recvtag, comm, true
    ));
    let rb = tri!(start_recv(CALL, &r));
    let sb = tri!(start_send(CALL, &s, Mode::Standard));
    let (sst, rst) = (request::wait_body(sb, comm), request::wait_body(rb, comm));
    // SAFETY: the caller's contract.
    unsafe { request::put_status(status, rst) };
    pair_result(CALL, comm, &sst, &rst)
}

/// The outcome of a send and a receive made together.
fn pair_result(call: &str, comm: Raw, sent: &MpiStatus, got: &MpiStatus) -> c_int {
    for st in [got, sent] {
        if st.error != MPI_SUCCESS {
            return fail(comm, st.error, format!("{call}: {}", recv_problem(st)));
        }
    }
    MPI_SUCCESS
}

/// # Safety
/// `buf` holds `count` elements of `datatype`.
#[unsafe(export_name = "PMPI_Sendrecv_replace")]
pub unsafe extern "C" fn MPI_Sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: Raw,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: Raw,
    status: *mut MpiStatus,
) -> c_int {
    const CALL: &str = "MPI_Sendrecv_replace";
    let s = tri!(check(
        CALL, buf, count, datatype, dest, sendtag, comm, false
    ));
    let mut r = tri!(check(
        CALL, buf, count, datatype, source, recvtag, comm, true
    ));
    // The message goes out from a packed copy, and comes in to a staging buffer.
    let mut out = Vec::with_capacity(s.bytes());
    // SAFETY: the caller's contract.
    unsafe { s.dt.pack(s.buf, s.count, &mut out) };
    let mut inbox = vec![0u8; r.bytes()];
    let byte = tri!(dt::lookup_ref(0x247));
    let (user_buf, user_dt, user_count) = (r.buf, r.dt.arc(), r.count);
    r.buf = inbox.as_mut_ptr();
    r.dt = byte.clone();
    r.count = inbox.len();
    let rb = tri!(start_recv(CALL, &r));
    let s2 = Args {
        comm: s.comm.clone(),
        comm_h: comm,
        dt: byte,
        buf: out.as_mut_ptr(),
        count: out.len(),
        peer: s.peer,
        any: false,
        tag: s.tag,
    };
    let sb = tri!(start_send(CALL, &s2, Mode::Standard));
    let (sst, rst) = (request::wait_body(sb, comm), request::wait_body(rb, comm));
    if rst.error == MPI_SUCCESS {
        let n = (rst.bytes().max(0) as usize).min(inbox.len());
        // SAFETY: the caller's contract: `buf` holds `count` elements.
        unsafe { user_dt.unpack(&inbox[..n], user_buf, user_count) };
    }
    // SAFETY: the caller's contract.
    unsafe { request::put_status(status, rst) };
    pair_result(CALL, comm, &sst, &rst)
}

// ---- probes ---------------------------------------------------------------------------

/// # Safety
/// `status` null or valid for a write.
#[unsafe(export_name = "PMPI_Probe")]
pub unsafe extern "C" fn MPI_Probe(
    source: c_int,
    tag: c_int,
    comm: Raw,
    status: *mut MpiStatus,
) -> c_int {
    const CALL: &str = "MPI_Probe";
    let a = tri!(check(
        CALL,
        std::ptr::null(),
        0,
        0x247,
        source,
        tag,
        comm,
        true
    ));
    if a.peer.is_none() && !a.any {
        // SAFETY: the caller's contract.
        unsafe { request::put_status(status, proc_null_status()) };
        return MPI_SUCCESS;
    }
    let p = tri!(p2p());
    match p.probe(self::source(&a), a.comm.tag_sel(a.tag)) {
        Ok(st) => {
            // SAFETY: the caller's contract.
            unsafe { request::put_status(status, status_of(&a.comm, Ok(st))) };
            MPI_SUCCESS
        }
        Err(e) => p2p_err(CALL, comm, &e),
    }
}

/// # Safety
/// `flag` valid for a write; `status` null or valid.
#[unsafe(export_name = "PMPI_Iprobe")]
pub unsafe extern "C" fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: Raw,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    const CALL: &str = "MPI_Iprobe";
    let a = tri!(check(
        CALL,
        std::ptr::null(),
        0,
        0x247,
        source,
        tag,
        comm,
        true
    ));
    if a.peer.is_none() && !a.any {
        // SAFETY: the caller's contract.
        unsafe {
            put(flag, 1);
            request::put_status(status, proc_null_status());
        }
        return MPI_SUCCESS;
    }
    let p = tri!(p2p());
    match p.iprobe(self::source(&a), a.comm.tag_sel(a.tag)) {
        Ok(found) => {
            // SAFETY: the caller's contract.
            unsafe {
                put(flag, c_int::from(found.is_some()));
                if let Some(st) = found {
                    request::put_status(status, status_of(&a.comm, Ok(st)));
                }
            }
            MPI_SUCCESS
        }
        Err(e) => p2p_err(CALL, comm, &e),
    }
}

/// A message taken out of matching by `MPI_Mprobe`.
struct Message {
    claim: u64,
    comm: Arc<Communicator>,
    comm_h: Raw,
}

static MESSAGES: Mutex<Table<Message>> = Mutex::new(Table::new(Kind::Message));

fn matched_probe(
    call: &str,
    source: c_int,
    tag: c_int,
    comm: Raw,
    block: bool,
    message: *mut Raw,
    status: *mut MpiStatus,
) -> Result<bool, c_int> {
    let a = check(call, std::ptr::null(), 0, 0x247, source, tag, comm, true)?;
    if a.peer.is_none() && !a.any {
        // SAFETY: the caller's contract.
        unsafe {
            put(message, MPI_MESSAGE_NO_PROC);
            request::put_status(status, proc_null_status());
        }
        return Ok(true);
    }
    let p = p2p()?;
    let got = if block {
        p.claim(self::source(&a), a.comm.tag_sel(a.tag)).map(Some)
    } else {
        p.iclaim(self::source(&a), a.comm.tag_sel(a.tag))
    };
    match got {
        Ok(Some((st, claim))) => {
            let h = MESSAGES
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(Message {
                    claim,
                    comm: a.comm.arc(),
                    comm_h: comm,
                });
            // SAFETY: the caller's contract.
            unsafe {
                put(message, h);
                request::put_status(status, status_of(&a.comm, Ok(st)));
            }
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(e) => Err(p2p_err(call, comm, &e)),
    }
}

/// # Safety
/// `message` valid for a write; `status` null or valid.
#[unsafe(export_name = "PMPI_Mprobe")]
pub unsafe extern "C" fn MPI_Mprobe(
    source: c_int,
    tag: c_int,
    comm: Raw,
    message: *mut Raw,
    status: *mut MpiStatus,
) -> c_int {
    match matched_probe("MPI_Mprobe", source, tag, comm, true, message, status) {
        Ok(_) => MPI_SUCCESS,
        Err(e) => e,
    }
}

/// # Safety
/// `flag` and `message` valid for writes; `status` null or valid.
#[unsafe(export_name = "PMPI_Improbe")]
pub unsafe extern "C" fn MPI_Improbe(
    source: c_int,
    tag: c_int,
    comm: Raw,
    flag: *mut c_int,
    message: *mut Raw,
    status: *mut MpiStatus,
) -> c_int {
    match matched_probe("MPI_Improbe", source, tag, comm, false, message, status) {
        Ok(found) => {
            // SAFETY: the caller's contract.
            unsafe { put(flag, c_int::from(found)) };
            MPI_SUCCESS
        }
        Err(e) => e,
    }
}

/// Posts the receive of a matched message: its request body.
fn start_mrecv(
    call: &str,
    buf: *mut c_void,
    count: c_int,
    datatype: Raw,
    message: *mut Raw,
) -> Result<(Body, Raw), c_int> {
    if message.is_null() {
        return Err(fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            format!("{call}: null message pointer"),
        ));
    }
    // SAFETY: non-null, valid by contract.
    let h = unsafe { *message };
    if h == MPI_MESSAGE_NO_PROC {
        // SAFETY: as above.
        unsafe { *message = MPI_MESSAGE_NULL };
        return Ok((Body::Done(proc_null_status()), MPI_COMM_WORLD));
    }
    let Some(m) = MESSAGES.lock().unwrap_or_else(|e| e.into_inner()).remove(h) else {
        return Err(fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            format!("{call}: invalid message handle {h:#x}"),
        ));
    };
    // SAFETY: as above.
    unsafe { *message = MPI_MESSAGE_NULL };
    let a = check(
        call,
        buf,
        count,
        datatype,
        MPI_ANY_SOURCE,
        MPI_ANY_TAG,
        m.comm_h,
        true,
    )?;
    let p = p2p()?;
    let (ptr, unpack) = if a.dt.contiguous() {
        (a.start(), None)
    } else {
        let mut v = vec![0u8; a.bytes()];
        let ptr = v.as_mut_ptr();
        (
            ptr,
            Some(Unpack {
                data: v,
                buf: a.buf,
                count: a.count,
                dt: a.dt.arc(),
            }),
        )
    };
    // SAFETY: the buffer is valid for `bytes` until the request completes, by MPI's rules.
    let id = unsafe { p.irecv_claimed_raw(m.claim, ptr, a.bytes()) }
        .map_err(|e| p2p_err(call, m.comm_h, &e))?;
    Ok((
        Body::P2p {
            id,
            comm: m.comm,
            recv: true,
            send_stage: None,
            unpack,
        },
        m.comm_h,
    ))
}

/// # Safety
/// `buf` holds `count` elements of `datatype`; `message` valid for reads and writes.
#[unsafe(export_name = "PMPI_Mrecv")]
pub unsafe extern "C" fn MPI_Mrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Raw,
    message: *mut Raw,
    status: *mut MpiStatus,
) -> c_int {
    let (body, comm) = tri!(start_mrecv("MPI_Mrecv", buf, count, datatype, message));
    let mut h = request::insert(body, None, comm);
    // SAFETY: a live handle; the caller's status.
    unsafe { request::MPI_Wait(&mut h, status) }
}

/// # Safety
/// As `MPI_Mrecv`, the buffer until the request completes; `request` valid for a write.
#[unsafe(export_name = "PMPI_Imrecv")]
pub unsafe extern "C" fn MPI_Imrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Raw,
    message: *mut Raw,
    request: *mut Raw,
) -> c_int {
    let (body, comm) = tri!(start_mrecv("MPI_Imrecv", buf, count, datatype, message));
    // SAFETY: the caller's contract.
    unsafe { put(request, request::insert(body, None, comm)) };
    MPI_SUCCESS
}

// ---- counts ---------------------------------------------------------------------------

fn count_of(
    call: &str,
    status: *const MpiStatus,
    datatype: Raw,
) -> Result<(i64, Arc<Datatype>), c_int> {
    if status.is_null() {
        return Err(fail(
            MPI_COMM_WORLD,
            MPI_ERR_ARG,
            format!("{call}: null status"),
        ));
    }
    let dt = dt::lookup(datatype).map_err(|e| {
        fail(
            MPI_COMM_WORLD,
            e,
            format!("{call}: invalid datatype {datatype:#x}"),
        )
    })?;
    // SAFETY: non-null, valid by contract.
    Ok((unsafe { (*status).bytes() }, dt))
}

/// # Safety
/// `status` valid for a read; `count` for a write.
#[unsafe(export_name = "PMPI_Get_count")]
pub unsafe extern "C" fn MPI_Get_count(
    status: *const MpiStatus,
    datatype: Raw,
    count: *mut c_int,
) -> c_int {
    let (bytes, dt) = tri!(count_of("MPI_Get_count", status, datatype));
    let size = dt.size() as i64;
    let n = if size == 0 {
        0
    } else if bytes % size != 0 || bytes / size > i64::from(c_int::MAX) {
        MPI_UNDEFINED
    } else {
        (bytes / size) as c_int
    };
    // SAFETY: the caller's contract.
    unsafe { put(count, n) };
    MPI_SUCCESS
}

// MPI_Get_elements and MPI_Get_elements_x are datatype/capi.rs's (merge of mpicore and
// mpitypes).

/// # Safety
/// `status` valid for reads and writes.
#[unsafe(export_name = "PMPI_Status_set_elements")]
pub unsafe extern "C" fn MPI_Status_set_elements(
    status: *mut MpiStatus,
    datatype: Raw,
    count: c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { MPI_Status_set_elements_x(status, datatype, i64::from(count)) }
}

/// # Safety
/// `status` valid for reads and writes.
#[unsafe(export_name = "PMPI_Status_set_elements_x")]
pub unsafe extern "C" fn MPI_Status_set_elements_x(
    status: *mut MpiStatus,
    datatype: Raw,
    count: i64,
) -> c_int {
    let (_, dt) = tri!(count_of("MPI_Status_set_elements", status, datatype));
    // SAFETY: non-null (checked), valid by contract.
    unsafe { (*status).set_bytes(count * dt.size() as i64) };
    MPI_SUCCESS
}
