//! The C functions of one-sided communication.

use std::ffi::{c_char, c_void};
use std::os::raw::c_int;
use std::sync::Arc;

use super::*;
use crate::datatype::{self, Datatype};
use crate::handle::Raw;

const MPI_WIN_BASE: c_int = 601;
const MPI_WIN_DISP_UNIT: c_int = 602;
const MPI_WIN_SIZE: c_int = 603;
const MPI_WIN_CREATE_FLAVOR: c_int = 604;
const MPI_WIN_MODEL: c_int = 605;

/// The window's own communicator: a duplicate of `comm` (its context carries the window's
/// messages), with `MPI_ERRORS_ARE_FATAL`, the default handler of a window.
fn dup(comm: Raw) -> Result<(Raw, Channel), (c_int, String)> {
    let mut h: Raw = 0;
    // SAFETY: `h` is a local handle to write.
    let rc = unsafe { crate::comm::MPI_Comm_dup(comm, &mut h) };
    if rc != MPI_SUCCESS {
        return Err((rc, "duplicating the communicator failed".to_string()));
    }
    crate::runtime::MPI_Comm_set_errhandler(h, MPI_ERRORS_ARE_FATAL);
    let c = crate::comm::lookup(h).map_err(|e| (e, "the duplicate vanished".to_string()))?;
    let p2p = crate::runtime::p2p().map_err(|e| (e, "MPI is not initialised".to_string()))?;
    let ch = Channel {
        p2p,
        ranks: c.group.ranks.clone(),
        me: c.rank,
        ctx: c.ctx,
    };
    Ok((h, ch))
}

fn free_comm(mut h: Raw) {
    // SAFETY: `h` is a local handle.
    unsafe { crate::comm::MPI_Comm_free(&mut h) };
}

/// Whether all of the channel's processes run on this host.
fn same_host(ch: &Channel) -> bool {
    let local = ch.p2p.host_local();
    let me = ch.ranks[ch.me as usize];
    ch.ranks
        .iter()
        .all(|&r| r == me || local.get(r as usize).copied().unwrap_or(false))
}

const MPI_ERRORS_ARE_FATAL: Raw = 0x141;
const MPI_COMM_WORLD: Raw = 0x101;

fn err(code: c_int, what: &str) -> c_int {
    crate::runtime::fail(MPI_COMM_WORLD, code, what)
}

fn report((code, what): Failure) -> c_int {
    err(code, &what)
}

/// Reports through the window's error handler (its communicator's).
fn report_w(w: &Window, (code, what): Failure) -> c_int {
    crate::runtime::fail(w.comm, code, what)
}

fn errw(w: &Window, code: c_int, what: &str) -> c_int {
    crate::runtime::fail(w.comm, code, what)
}

macro_rules! wtri {
    ($w:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(f) => return report_w(&$w, f),
        }
    };
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(f) => return report(f),
        }
    };
}

fn win(call: &str, h: Raw) -> Result<Arc<Window>, Failure> {
    lookup(h).map_err(|c| {
        let what = if h == MPI_WIN_NULL {
            format!("{call}: the window is MPI_WIN_NULL")
        } else {
            format!("{call}: {h:#x} is not a window (freed, or a handle of another kind)")
        };
        (c, what)
    })
}

fn dtype(call: &str, h: Raw) -> Result<Arc<Datatype>, Failure> {
    let t = datatype::lookup(h).map_err(|c| (c, format!("{call}: {h:#x} is not a datatype")))?;
    if !t.committed() {
        return Err((
            MPI_ERR_TYPE,
            format!("{call}: the datatype is not committed (MPI_Type_commit)"),
        ));
    }
    Ok(t)
}

fn count(call: &str, what: &str, n: c_int) -> Result<usize, Failure> {
    usize::try_from(n).map_err(|_| (MPI_ERR_COUNT, format!("{call}: {what} {n} is negative")))
}

/// The predefined value type accumulate computes on: both sides must have the same.
fn acc_type(call: &str, a: &Datatype, b: &Datatype) -> Result<Raw, Failure> {
    match (a.basic(), b.basic()) {
        (Some((x, _)), Some((y, _))) if x == y => datatype::predefined_for(x).ok_or((
            MPI_ERR_TYPE,
            format!("{call}: no predefined type for {x:?}"),
        )),
        _ => Err((
            MPI_ERR_TYPE,
            format!(
                "{call}: the origin and target types must be made of one and the same predefined type"
            ),
        )),
    }
}

fn check_op(call: &str, op: Raw, t: &Datatype) -> Result<(), Failure> {
    if !ops::valid(op) {
        return Err((
            MPI_ERR_OP,
            format!("{call}: {op:#x} is not a predefined operation"),
        ));
    }
    ops::check(op, t).map_err(|c| {
        (
            c,
            format!("{call}: the operation {op:#x} is not defined on the target type's values"),
        )
    })
}

/// # Safety
/// The C caller passes valid pointers.
#[allow(clippy::too_many_arguments)]
unsafe fn create_common(
    call: &str,
    base: usize,
    size: isize,
    disp_unit: c_int,
    comm: Raw,
    flavor: c_int,
    owned: Option<Memory>,
    out: *mut Raw,
) -> Result<(), Failure> {
    let (h, ch) = dup(comm).map_err(|(c, w)| (c, format!("{call}: {w}")))?;
    let w = Window::create(ch, base, size as usize, disp_unit, flavor, owned, h)?;
    // SAFETY: checked non-null by the caller.
    unsafe { out.write(register(w)) };
    Ok(())
}

fn check_create(call: &str, size: isize, disp_unit: c_int, win: *mut Raw) -> Result<(), Failure> {
    if size < 0 {
        return Err((MPI_ERR_SIZE, format!("{call}: size {size} is negative")));
    }
    if disp_unit <= 0 {
        return Err((
            MPI_ERR_DISP,
            format!("{call}: disp_unit {disp_unit} must be positive"),
        ));
    }
    if win.is_null() {
        return Err((MPI_ERR_ARG, format!("{call}: win is NULL")));
    }
    Ok(())
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_create")]
pub unsafe extern "C" fn MPI_Win_create(
    base: *mut c_void,
    size: isize,
    disp_unit: c_int,
    _info: Raw,
    comm: Raw,
    win: *mut Raw,
) -> c_int {
    let call = "MPI_Win_create";
    tri!(check_create(call, size, disp_unit, win));
    // SAFETY: win checked.
    tri!(unsafe {
        create_common(
            call,
            base as usize,
            size,
            disp_unit,
            comm,
            MPI_WIN_FLAVOR_CREATE,
            None,
            win,
        )
    });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_allocate")]
pub unsafe extern "C" fn MPI_Win_allocate(
    size: isize,
    disp_unit: c_int,
    _info: Raw,
    comm: Raw,
    baseptr: *mut c_void,
    win: *mut Raw,
) -> c_int {
    let call = "MPI_Win_allocate";
    tri!(check_create(call, size, disp_unit, win));
    if baseptr.is_null() {
        return err(MPI_ERR_ARG, "MPI_Win_allocate: baseptr is NULL");
    }
    let Ok(layout) = std::alloc::Layout::from_size_align(size.max(1) as usize, 64) else {
        return err(MPI_ERR_NO_MEM, "MPI_Win_allocate: size too large");
    };
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return err(
            MPI_ERR_NO_MEM,
            &format!("MPI_Win_allocate: {size} bytes could not be allocated"),
        );
    }
    // SAFETY: win checked; on failure the memory is freed by the window's drop or here.
    let r = unsafe {
        create_common(
            call,
            p as usize,
            size,
            disp_unit,
            comm,
            MPI_WIN_FLAVOR_ALLOCATE,
            Some(Memory::Heap(p as usize, layout)),
            win,
        )
    };
    if let Err(e) = r {
        // A window that never came to be did not take the memory.
        return report(e);
    }
    // SAFETY: baseptr is the address of a pointer (`void *baseptr` holds a `void **`).
    unsafe { (baseptr as *mut *mut c_void).write(p as *mut c_void) };
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_free")]
pub unsafe extern "C" fn MPI_Win_free(win: *mut Raw) -> c_int {
    let call = "MPI_Win_free";
    if win.is_null() {
        return err(MPI_ERR_ARG, "MPI_Win_free: win is NULL");
    }
    // SAFETY: non-null.
    let h = unsafe { *win };
    let w = tri!(super::capi::win(call, h));
    // The program's attributes go first: their delete callbacks see the window.
    let rc = crate::comm::win_free_attrs(h);
    if rc != MPI_SUCCESS {
        return errw(
            &w,
            rc,
            "MPI_Win_free: an attribute's delete callback failed",
        );
    }
    wtri!(w, w.free());
    release(h);
    free_comm(w.comm);
    // SAFETY: non-null.
    unsafe { *win = MPI_WIN_NULL };
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Put")]
pub unsafe extern "C" fn MPI_Put(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: Raw,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: Raw,
    win: Raw,
) -> c_int {
    let call = "MPI_Put";
    let w = tri!(super::capi::win(call, win));
    let oc = wtri!(w, count(call, "origin_count", origin_count));
    let tc = wtri!(w, count(call, "target_count", target_count));
    let odt = wtri!(w, dtype(call, origin_datatype));
    let tdt = wtri!(w, dtype(call, target_datatype));
    // SAFETY: the C caller vouches for the origin buffer.
    wtri!(w, unsafe {
        w.put(
            call,
            origin_addr as *const u8,
            oc,
            &odt,
            target_rank,
            target_disp,
            tc,
            &tdt,
            None,
        )
    });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Accumulate")]
pub unsafe extern "C" fn MPI_Accumulate(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: Raw,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: Raw,
    op: Raw,
    win: Raw,
) -> c_int {
    let call = "MPI_Accumulate";
    let w = tri!(super::capi::win(call, win));
    let oc = wtri!(w, count(call, "origin_count", origin_count));
    let tc = wtri!(w, count(call, "target_count", target_count));
    let odt = wtri!(w, dtype(call, origin_datatype));
    let tdt = wtri!(w, dtype(call, target_datatype));
    // No data on either side: nothing to do, whatever the (possibly empty) types are made
    // of.
    if oc * odt.size() == 0 && tc * tdt.size() == 0 {
        return MPI_SUCCESS;
    }
    wtri!(w, check_op(call, op, &tdt));
    let ty = wtri!(w, acc_type(call, &odt, &tdt));
    // SAFETY: the C caller vouches for the origin buffer.
    wtri!(w, unsafe {
        w.put(
            call,
            origin_addr as *const u8,
            oc,
            &odt,
            target_rank,
            target_disp,
            tc,
            &tdt,
            Some((op, ty)),
        )
    });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Get")]
pub unsafe extern "C" fn MPI_Get(
    origin_addr: *mut c_void,
    origin_count: c_int,
    origin_datatype: Raw,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: Raw,
    win: Raw,
) -> c_int {
    let call = "MPI_Get";
    let w = tri!(super::capi::win(call, win));
    let oc = wtri!(w, count(call, "origin_count", origin_count));
    let tc = wtri!(w, count(call, "target_count", target_count));
    let odt = wtri!(w, dtype(call, origin_datatype));
    let tdt = wtri!(w, dtype(call, target_datatype));
    // SAFETY: the C caller keeps the origin buffer for the epoch.
    wtri!(w, unsafe {
        w.get(
            call,
            origin_addr as *mut u8,
            oc,
            &odt,
            target_rank,
            target_disp,
            tc,
            &tdt,
            None,
            None,
        )
    });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Get_accumulate")]
pub unsafe extern "C" fn MPI_Get_accumulate(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: Raw,
    result_addr: *mut c_void,
    result_count: c_int,
    result_datatype: Raw,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: Raw,
    op: Raw,
    win: Raw,
) -> c_int {
    let call = "MPI_Get_accumulate";
    let w = tri!(super::capi::win(call, win));
    // SAFETY: forwarded.
    wtri!(w, unsafe {
        get_accumulate(
            &w,
            call,
            origin_addr,
            origin_count,
            origin_datatype,
            result_addr,
            result_count,
            result_datatype,
            target_rank,
            target_disp,
            target_count,
            target_datatype,
            op,
        )
    });
    MPI_SUCCESS
}

/// `MPI_Get_accumulate` on a window looked up: the get's id.
///
/// # Safety
/// The C caller's buffers.
#[allow(clippy::too_many_arguments)]
unsafe fn get_accumulate(
    w: &Window,
    call: &str,
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: Raw,
    result_addr: *mut c_void,
    result_count: c_int,
    result_datatype: Raw,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: Raw,
    op: Raw,
) -> Result<u64, Failure> {
    let rc = count(call, "result_count", result_count)?;
    let tc = count(call, "target_count", target_count)?;
    let rdt = dtype(call, result_datatype)?;
    let tdt = dtype(call, target_datatype)?;
    // No data anywhere: complete at once (id 0), whatever the empty types are made of.
    if rc * rdt.size() == 0 && tc * tdt.size() == 0 {
        let origin_bytes = if op == MPI_NO_OP {
            0
        } else {
            count(call, "origin_count", origin_count)? * dtype(call, origin_datatype)?.size()
        };
        if origin_bytes == 0 {
            return Ok(0);
        }
    }
    check_op(call, op, &tdt)?;
    let ty = acc_type(call, &rdt, &tdt)?;
    let mut data = Vec::new();
    if op != MPI_NO_OP {
        let oc = count(call, "origin_count", origin_count)?;
        let odt = dtype(call, origin_datatype)?;
        acc_type(call, &odt, &tdt)?;
        if oc * odt.size() != tc * tdt.size() {
            return Err((
                MPI_ERR_TYPE,
                format!("{call}: the origin and target data differ in size"),
            ));
        }
        // SAFETY: the C caller vouches for the origin buffer.
        unsafe { odt.pack(origin_addr as *const u8, oc, &mut data) };
    }
    // SAFETY: the C caller keeps the result buffer until the operation completes.
    unsafe {
        w.get(
            call,
            result_addr as *mut u8,
            rc,
            &rdt,
            target_rank,
            target_disp,
            tc,
            &tdt,
            Some((op, ty, data)),
            None,
        )
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Fetch_and_op")]
pub unsafe extern "C" fn MPI_Fetch_and_op(
    origin_addr: *const c_void,
    result_addr: *mut c_void,
    datatype: Raw,
    target_rank: c_int,
    target_disp: isize,
    op: Raw,
    win: Raw,
) -> c_int {
    // SAFETY: forwarded: one element each.
    unsafe {
        MPI_Get_accumulate(
            origin_addr,
            1,
            datatype,
            result_addr,
            1,
            datatype,
            target_rank,
            target_disp,
            1,
            datatype,
            op,
            win,
        )
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Compare_and_swap")]
pub unsafe extern "C" fn MPI_Compare_and_swap(
    origin_addr: *const c_void,
    compare_addr: *const c_void,
    result_addr: *mut c_void,
    datatype: Raw,
    target_rank: c_int,
    target_disp: isize,
    win: Raw,
) -> c_int {
    let call = "MPI_Compare_and_swap";
    let w = tri!(super::capi::win(call, win));
    let dt = wtri!(w, dtype(call, datatype));
    if dt.named().is_none() || !dt.contiguous() {
        return errw(
            &w,
            MPI_ERR_TYPE,
            "MPI_Compare_and_swap: the datatype must be a predefined integer-like type",
        );
    }
    let (mut cmp, mut new) = (Vec::new(), Vec::new());
    // SAFETY: the C caller passes one element at each.
    unsafe {
        dt.pack(compare_addr as *const u8, 1, &mut cmp);
        dt.pack(origin_addr as *const u8, 1, &mut new);
    }
    // SAFETY: the C caller keeps the result buffer for the epoch.
    wtri!(w, unsafe {
        w.get(
            call,
            result_addr as *mut u8,
            1,
            &dt,
            target_rank,
            target_disp,
            1,
            &dt,
            None,
            Some((cmp, new)),
        )
    });
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Win_fence")]
pub extern "C" fn MPI_Win_fence(assert: c_int, win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_fence", win));
    wtri!(w, w.fence(assert));
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Win_lock")]
pub extern "C" fn MPI_Win_lock(lock_type: c_int, rank: c_int, _assert: c_int, win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_lock", win));
    wtri!(w, w.lock(lock_type, rank));
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Win_unlock")]
pub extern "C" fn MPI_Win_unlock(rank: c_int, win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_unlock", win));
    wtri!(w, w.unlock(rank));
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Win_lock_all")]
pub extern "C" fn MPI_Win_lock_all(_assert: c_int, win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_lock_all", win));
    wtri!(w, w.lock_all());
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Win_unlock_all")]
pub extern "C" fn MPI_Win_unlock_all(win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_unlock_all", win));
    wtri!(w, w.unlock_all());
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Win_flush")]
pub extern "C" fn MPI_Win_flush(rank: c_int, win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_flush", win));
    wtri!(w, w.flush(Some(rank)));
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Win_flush_all")]
pub extern "C" fn MPI_Win_flush_all(win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_flush_all", win));
    wtri!(w, w.flush(None));
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Win_flush_local")]
pub extern "C" fn MPI_Win_flush_local(rank: c_int, win: Raw) -> c_int {
    MPI_Win_flush(rank, win)
}

#[unsafe(export_name = "PMPI_Win_flush_local_all")]
pub extern "C" fn MPI_Win_flush_local_all(win: Raw) -> c_int {
    MPI_Win_flush_all(win)
}

/// The window's memory is the process's own (the unified model): a memory barrier.
#[unsafe(export_name = "PMPI_Win_sync")]
pub extern "C" fn MPI_Win_sync(win: Raw) -> c_int {
    tri!(super::capi::win("MPI_Win_sync", win));
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_get_group")]
pub unsafe extern "C" fn MPI_Win_get_group(win: Raw, group: *mut Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_get_group", win));
    if group.is_null() {
        return errw(&w, MPI_ERR_ARG, "MPI_Win_get_group: group is NULL");
    }
    // SAFETY: `group` checked non-null.
    unsafe { crate::comm::MPI_Comm_group(w.comm, group) }
}

/// The predefined attributes: `MPI_WIN_BASE` gives the base address itself, the others a
/// pointer to the value, as the C binding has it.
///
/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_get_attr")]
pub unsafe extern "C" fn MPI_Win_get_attr(
    win: Raw,
    keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_get_attr", win));
    if attribute_val.is_null() || flag.is_null() {
        return errw(
            &w,
            MPI_ERR_ARG,
            "MPI_Win_get_attr: attribute_val or flag is NULL",
        );
    }
    let v: Option<*const c_void> = match keyval {
        MPI_WIN_BASE => Some(w.base() as *const c_void),
        MPI_WIN_SIZE => Some(&w.attr_size as *const isize as *const c_void),
        MPI_WIN_DISP_UNIT => Some(&w.attr_disp as *const c_int as *const c_void),
        MPI_WIN_CREATE_FLAVOR => Some(&w.attr_flavor as *const c_int as *const c_void),
        MPI_WIN_MODEL => Some(&w.attr_model as *const c_int as *const c_void),
        // The program's keys: core keeps their values (comm.rs).
        k => crate::comm::win_attr(win, k).map(|v| v as *const c_void),
    };
    // SAFETY: the window (and so the values pointed to) lives until MPI_Win_free; the C
    // caller passes the address of a pointer and of an int.
    unsafe {
        *flag = v.is_some() as c_int;
        if let Some(v) = v {
            *(attribute_val as *mut *const c_void) = v;
        }
    }
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_set_name")]
pub unsafe extern "C" fn MPI_Win_set_name(win: Raw, name: *const c_char) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_set_name", win));
    if name.is_null() {
        return errw(&w, MPI_ERR_ARG, "MPI_Win_set_name: win_name is NULL");
    }
    // SAFETY: non-null and NUL-terminated, as the C caller vouches.
    w.set_name(&unsafe { c_name(name) });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_get_name")]
pub unsafe extern "C" fn MPI_Win_get_name(
    win: Raw,
    name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_get_name", win));
    if name.is_null() || resultlen.is_null() {
        return errw(
            &w,
            MPI_ERR_ARG,
            "MPI_Win_get_name: win_name or resultlen is NULL",
        );
    }
    let s = w.name();
    // SAFETY: the C caller passes MPI_MAX_OBJECT_NAME chars (the name is shorter) and an int.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr() as *const c_char, name, s.len());
        *name.add(s.len()) = 0;
        *resultlen = s.len() as c_int;
    }
    MPI_SUCCESS
}

fn group(call: &str, w: &Window, h: Raw) -> Result<Vec<u32>, Failure> {
    let g = crate::group::lookup(h)
        .map_err(|c| (c, format!("{call}: {h:#x} is not a group")))?
        .ranks
        .clone();
    w.window_ranks(call, &g)
}

#[unsafe(export_name = "PMPI_Win_post")]
pub extern "C" fn MPI_Win_post(grp: Raw, _assert: c_int, win: Raw) -> c_int {
    let call = "MPI_Win_post";
    let w = tri!(super::capi::win(call, win));
    let g = wtri!(w, group(call, &w, grp));
    wtri!(w, w.post(&g));
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Win_start")]
pub extern "C" fn MPI_Win_start(grp: Raw, _assert: c_int, win: Raw) -> c_int {
    let call = "MPI_Win_start";
    let w = tri!(super::capi::win(call, win));
    let g = wtri!(w, group(call, &w, grp));
    wtri!(w, w.start(&g));
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Win_complete")]
pub extern "C" fn MPI_Win_complete(win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_complete", win));
    wtri!(w, w.complete());
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Win_wait")]
pub extern "C" fn MPI_Win_wait(win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_wait", win));
    wtri!(w, w.wait_exposure(true));
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_test")]
pub unsafe extern "C" fn MPI_Win_test(win: Raw, flag: *mut c_int) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_test", win));
    if flag.is_null() {
        return errw(&w, MPI_ERR_ARG, "MPI_Win_test: flag is NULL");
    }
    let done = wtri!(w, w.wait_exposure(false));
    // SAFETY: non-null; the C caller passes an int.
    unsafe { *flag = done as c_int };
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_create_dynamic")]
pub unsafe extern "C" fn MPI_Win_create_dynamic(_info: Raw, comm: Raw, win: *mut Raw) -> c_int {
    let call = "MPI_Win_create_dynamic";
    tri!(check_create(call, 0, 1, win));
    // SAFETY: win checked. Displacements are addresses: base 0, unbounded, unit 1.
    tri!(unsafe {
        create_common(
            call,
            0,
            isize::MAX,
            1,
            comm,
            MPI_WIN_FLAVOR_DYNAMIC,
            None,
            win,
        )
    });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_attach")]
pub unsafe extern "C" fn MPI_Win_attach(win: Raw, base: *mut c_void, size: isize) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_attach", win));
    if size < 0 {
        return errw(
            &w,
            MPI_ERR_SIZE,
            &format!("MPI_Win_attach: size {size} is negative"),
        );
    }
    wtri!(w, w.attach(base as usize, size as usize));
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_detach")]
pub unsafe extern "C" fn MPI_Win_detach(win: Raw, base: *const c_void) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_detach", win));
    wtri!(w, w.detach(base as usize));
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_allocate_shared")]
pub unsafe extern "C" fn MPI_Win_allocate_shared(
    size: isize,
    disp_unit: c_int,
    _info: Raw,
    comm: Raw,
    baseptr: *mut c_void,
    win: *mut Raw,
) -> c_int {
    let call = "MPI_Win_allocate_shared";
    tri!(check_create(call, size, disp_unit, win));
    if baseptr.is_null() {
        return err(MPI_ERR_ARG, "MPI_Win_allocate_shared: baseptr is NULL");
    }
    let (h, ch) = tri!(dup(comm).map_err(|(c, w)| (c, format!("{call}: {w}"))));
    let local = same_host(&ch);
    let w = tri!(allocate_shared(ch, size as usize, disp_unit, h, local));
    // SAFETY: baseptr is the address of a pointer; win checked.
    unsafe {
        (baseptr as *mut *mut c_void).write(w.base() as *mut c_void);
        win.write(register(w));
    }
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_shared_query")]
pub unsafe extern "C" fn MPI_Win_shared_query(
    win: Raw,
    rank: c_int,
    size: *mut isize,
    disp_unit: *mut c_int,
    baseptr: *mut c_void,
) -> c_int {
    let call = "MPI_Win_shared_query";
    let w = tri!(super::capi::win(call, win));
    if size.is_null() || disp_unit.is_null() || baseptr.is_null() {
        return errw(
            &w,
            MPI_ERR_ARG,
            "MPI_Win_shared_query: an output argument is NULL",
        );
    }
    let r = if rank == MPI_PROC_NULL {
        None
    } else if rank < 0 {
        return errw(
            &w,
            MPI_ERR_RANK,
            &format!("{call}: rank {rank} is negative"),
        );
    } else {
        Some(rank as u32)
    };
    let (a, s, d) = wtri!(w, w.shared_segment(r));
    // SAFETY: checked non-null; the C caller passes writable outputs.
    unsafe {
        *size = s as isize;
        *disp_unit = d;
        (baseptr as *mut *mut c_void).write(a as *mut c_void);
    }
    MPI_SUCCESS
}

/// A request-based operation in core's request table.
struct Rma {
    w: Arc<Window>,
    /// The get whose data completes it (0: complete already).
    id: u64,
}

impl crate::request::Operation for Rma {
    fn progress(&mut self) -> Option<Result<(), c_int>> {
        if self.id == 0 || self.w.arrived(self.id) {
            return Some(Ok(()));
        }
        if let Err((c, _)) = self.w.poll_replies() {
            return Some(Err(c));
        }
        self.w.arrived(self.id).then_some(Ok(()))
    }
}

/// # Safety
/// `request` is writable.
unsafe fn start(w: Arc<Window>, id: u64, request: *mut Raw) -> c_int {
    if request.is_null() {
        return errw(&w, MPI_ERR_ARG, "request is NULL");
    }
    let h = crate::request::start_operation(Box::new(Rma { w, id }));
    // SAFETY: checked non-null.
    unsafe { request.write(h) };
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Rput")]
pub unsafe extern "C" fn MPI_Rput(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: Raw,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: Raw,
    win: Raw,
    request: *mut Raw,
) -> c_int {
    let w = tri!(super::capi::win("MPI_Rput", win));
    wtri!(w, w.check_passive("MPI_Rput", target_rank));
    // SAFETY: forwarded.
    let rc = unsafe {
        MPI_Put(
            origin_addr,
            origin_count,
            origin_datatype,
            target_rank,
            target_disp,
            target_count,
            target_datatype,
            win,
        )
    };
    if rc != MPI_SUCCESS {
        return rc;
    }
    // SAFETY: forwarded.
    unsafe { start(w, 0, request) }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Raccumulate")]
pub unsafe extern "C" fn MPI_Raccumulate(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: Raw,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: Raw,
    op: Raw,
    win: Raw,
    request: *mut Raw,
) -> c_int {
    let w = tri!(super::capi::win("MPI_Raccumulate", win));
    wtri!(w, w.check_passive("MPI_Raccumulate", target_rank));
    // SAFETY: forwarded.
    let rc = unsafe {
        MPI_Accumulate(
            origin_addr,
            origin_count,
            origin_datatype,
            target_rank,
            target_disp,
            target_count,
            target_datatype,
            op,
            win,
        )
    };
    if rc != MPI_SUCCESS {
        return rc;
    }
    // SAFETY: forwarded.
    unsafe { start(w, 0, request) }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Rget")]
pub unsafe extern "C" fn MPI_Rget(
    origin_addr: *mut c_void,
    origin_count: c_int,
    origin_datatype: Raw,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: Raw,
    win: Raw,
    request: *mut Raw,
) -> c_int {
    let call = "MPI_Rget";
    let w = tri!(super::capi::win(call, win));
    wtri!(w, w.check_passive(call, target_rank));
    let oc = wtri!(w, count(call, "origin_count", origin_count));
    let tc = wtri!(w, count(call, "target_count", target_count));
    let odt = wtri!(w, dtype(call, origin_datatype));
    let tdt = wtri!(w, dtype(call, target_datatype));
    // SAFETY: the C caller keeps the origin buffer until the request completes.
    let id = wtri!(w, unsafe {
        w.get(
            call,
            origin_addr as *mut u8,
            oc,
            &odt,
            target_rank,
            target_disp,
            tc,
            &tdt,
            None,
            None,
        )
    });
    // SAFETY: forwarded.
    unsafe { start(w, id, request) }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Rget_accumulate")]
pub unsafe extern "C" fn MPI_Rget_accumulate(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: Raw,
    result_addr: *mut c_void,
    result_count: c_int,
    result_datatype: Raw,
    target_rank: c_int,
    target_disp: isize,
    target_count: c_int,
    target_datatype: Raw,
    op: Raw,
    win: Raw,
    request: *mut Raw,
) -> c_int {
    let call = "MPI_Rget_accumulate";
    let w = tri!(super::capi::win(call, win));
    wtri!(w, w.check_passive(call, target_rank));
    // SAFETY: forwarded.
    let id = wtri!(w, unsafe {
        get_accumulate(
            &w,
            call,
            origin_addr,
            origin_count,
            origin_datatype,
            result_addr,
            result_count,
            result_datatype,
            target_rank,
            target_disp,
            target_count,
            target_datatype,
            op,
        )
    });
    // SAFETY: forwarded.
    unsafe { start(w, id, request) }
}

/// `MPI_Win_create_errhandler`: a communicator error handler (the window's errors go
/// through its communicator: the function receives the window's handle from
/// `MPI_Win_call_errhandler`, the communicator's from a failed RMA call).
///
/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_create_errhandler")]
pub unsafe extern "C" fn MPI_Win_create_errhandler(
    f: Option<crate::runtime::ErrFn>,
    errhandler: *mut Raw,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { crate::runtime::MPI_Comm_create_errhandler(f, errhandler) }
}

#[unsafe(export_name = "PMPI_Win_set_errhandler")]
pub extern "C" fn MPI_Win_set_errhandler(win: Raw, errhandler: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_set_errhandler", win));
    crate::runtime::MPI_Comm_set_errhandler(w.comm, errhandler)
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Win_get_errhandler")]
pub unsafe extern "C" fn MPI_Win_get_errhandler(win: Raw, errhandler: *mut Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_get_errhandler", win));
    // SAFETY: forwarded.
    unsafe { crate::runtime::MPI_Comm_get_errhandler(w.comm, errhandler) }
}

#[unsafe(export_name = "PMPI_Win_call_errhandler")]
pub extern "C" fn MPI_Win_call_errhandler(win: Raw, errorcode: c_int) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_call_errhandler", win));
    // The handler is the communicator's; a user's function is given the window.
    crate::runtime::fail_on(
        w.comm,
        win,
        errorcode,
        format!("MPI_Win_call_errhandler: error code {errorcode}"),
    );
    MPI_SUCCESS
}

/// The window keeps no hints: a new, empty info object.
///
/// # Safety
/// `info_used` writable.
#[unsafe(export_name = "PMPI_Win_get_info")]
pub unsafe extern "C" fn MPI_Win_get_info(win: Raw, info_used: *mut Raw) -> c_int {
    tri!(super::capi::win("MPI_Win_get_info", win));
    // SAFETY: forwarded.
    unsafe { crate::runtime::MPI_Info_create(info_used) }
}

/// Hints are accepted and ignored (the standard allows it).
#[unsafe(export_name = "PMPI_Win_set_info")]
pub extern "C" fn MPI_Win_set_info(win: Raw, _info: Raw) -> c_int {
    tri!(super::capi::win("MPI_Win_set_info", win));
    MPI_SUCCESS
}
