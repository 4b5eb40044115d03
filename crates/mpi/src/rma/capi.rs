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

/// Stand-ins for core's communicators and error handlers until `mpicore` is merged.
/// REPLACE:
/// - `fail`: `crate::runtime::fail(comm, code, what)` (with the window's handler once
///   windows have one);
/// - `dup`: `MPI_Comm_dup(comm, &mut h)`, then `crate::comm::lookup(h)` gives `c` and the
///   channel is `Channel { p2p: crate::runtime::p2p()?, ranks: c.group.ranks.clone(),
///   me: c.rank, ctx: c.ctx }`;
/// - `free_comm`: `MPI_Comm_free(&mut h)`; `comm_group`: `MPI_Comm_group(h, group)`.
mod shim {
    use super::*;

    pub fn fail(_comm: Raw, code: c_int, _what: &str) -> c_int {
        code
    }

    pub fn dup(_comm: Raw) -> Result<(Raw, Channel), (c_int, String)> {
        Err((
            MPI_ERR_COMM,
            "communicators are not linked in yet".to_string(),
        ))
    }

    pub fn free_comm(_h: Raw) {}

    pub fn comm_group(_h: Raw, _group: *mut Raw) -> c_int {
        MPI_ERR_UNSUPPORTED_OPERATION
    }
}

const MPI_COMM_WORLD: Raw = 0x101;

fn err(code: c_int, what: &str) -> c_int {
    shim::fail(MPI_COMM_WORLD, code, what)
}

fn report((code, what): Failure) -> c_int {
    err(code, &what)
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

fn check_op(call: &str, op: Raw) -> Result<(), Failure> {
    if ops::valid(op) {
        Ok(())
    } else {
        Err((
            MPI_ERR_OP,
            format!("{call}: {op:#x} is not a predefined operation"),
        ))
    }
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
    owned: Option<(usize, std::alloc::Layout)>,
    out: *mut Raw,
) -> Result<(), Failure> {
    let (h, ch) = shim::dup(comm).map_err(|(c, w)| (c, format!("{call}: {w}")))?;
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
#[unsafe(no_mangle)]
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
#[unsafe(no_mangle)]
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
            Some((p as usize, layout)),
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
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_free(win: *mut Raw) -> c_int {
    let call = "MPI_Win_free";
    if win.is_null() {
        return err(MPI_ERR_ARG, "MPI_Win_free: win is NULL");
    }
    // SAFETY: non-null.
    let h = unsafe { *win };
    let w = tri!(super::capi::win(call, h));
    tri!(w.free());
    release(h);
    shim::free_comm(w.comm);
    // SAFETY: non-null.
    unsafe { *win = MPI_WIN_NULL };
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(no_mangle)]
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
    let oc = tri!(count(call, "origin_count", origin_count));
    let tc = tri!(count(call, "target_count", target_count));
    let odt = tri!(dtype(call, origin_datatype));
    let tdt = tri!(dtype(call, target_datatype));
    // SAFETY: the C caller vouches for the origin buffer.
    tri!(unsafe {
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
#[unsafe(no_mangle)]
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
    let oc = tri!(count(call, "origin_count", origin_count));
    let tc = tri!(count(call, "target_count", target_count));
    let odt = tri!(dtype(call, origin_datatype));
    let tdt = tri!(dtype(call, target_datatype));
    tri!(check_op(call, op));
    let ty = tri!(acc_type(call, &odt, &tdt));
    // SAFETY: the C caller vouches for the origin buffer.
    tri!(unsafe {
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
#[unsafe(no_mangle)]
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
    let oc = tri!(count(call, "origin_count", origin_count));
    let tc = tri!(count(call, "target_count", target_count));
    let odt = tri!(dtype(call, origin_datatype));
    let tdt = tri!(dtype(call, target_datatype));
    // SAFETY: the C caller keeps the origin buffer for the epoch.
    tri!(unsafe {
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
#[unsafe(no_mangle)]
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
    let rc = tri!(count(call, "result_count", result_count));
    let tc = tri!(count(call, "target_count", target_count));
    let rdt = tri!(dtype(call, result_datatype));
    let tdt = tri!(dtype(call, target_datatype));
    tri!(check_op(call, op));
    let ty = tri!(acc_type(call, &rdt, &tdt));
    let mut data = Vec::new();
    if op != MPI_NO_OP {
        let oc = tri!(count(call, "origin_count", origin_count));
        let odt = tri!(dtype(call, origin_datatype));
        tri!(acc_type(call, &odt, &tdt));
        if oc * odt.size() != tc * tdt.size() {
            return err(
                MPI_ERR_TYPE,
                "MPI_Get_accumulate: the origin and target data differ in size",
            );
        }
        // SAFETY: the C caller vouches for the origin buffer.
        unsafe { odt.pack(origin_addr as *const u8, oc, &mut data) };
    }
    // SAFETY: the C caller keeps the result buffer for the epoch.
    tri!(unsafe {
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
    });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(no_mangle)]
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
#[unsafe(no_mangle)]
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
    let dt = tri!(dtype(call, datatype));
    if dt.named().is_none() || !dt.contiguous() {
        return err(
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
    tri!(unsafe {
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

#[unsafe(no_mangle)]
pub extern "C" fn MPI_Win_fence(assert: c_int, win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_fence", win));
    tri!(w.fence(assert));
    MPI_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn MPI_Win_lock(lock_type: c_int, rank: c_int, _assert: c_int, win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_lock", win));
    tri!(w.lock(lock_type, rank));
    MPI_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn MPI_Win_unlock(rank: c_int, win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_unlock", win));
    tri!(w.unlock(rank));
    MPI_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn MPI_Win_lock_all(_assert: c_int, win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_lock_all", win));
    tri!(w.lock_all());
    MPI_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn MPI_Win_unlock_all(win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_unlock_all", win));
    tri!(w.unlock_all());
    MPI_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn MPI_Win_flush(rank: c_int, win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_flush", win));
    tri!(w.flush(Some(rank)));
    MPI_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn MPI_Win_flush_all(win: Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_flush_all", win));
    tri!(w.flush(None));
    MPI_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn MPI_Win_flush_local(rank: c_int, win: Raw) -> c_int {
    MPI_Win_flush(rank, win)
}

#[unsafe(no_mangle)]
pub extern "C" fn MPI_Win_flush_local_all(win: Raw) -> c_int {
    MPI_Win_flush_all(win)
}

/// The window's memory is the process's own (the unified model): a memory barrier.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Win_sync(win: Raw) -> c_int {
    tri!(super::capi::win("MPI_Win_sync", win));
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_get_group(win: Raw, group: *mut Raw) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_get_group", win));
    if group.is_null() {
        return err(MPI_ERR_ARG, "MPI_Win_get_group: group is NULL");
    }
    shim::comm_group(w.comm, group)
}

/// The predefined attributes: `MPI_WIN_BASE` gives the base address itself, the others a
/// pointer to the value, as the C binding has it.
///
/// # Safety
/// The C caller passes valid pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_get_attr(
    win: Raw,
    keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_get_attr", win));
    if attribute_val.is_null() || flag.is_null() {
        return err(
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
        _ => None,
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
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_set_name(win: Raw, name: *const c_char) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_set_name", win));
    if name.is_null() {
        return err(MPI_ERR_ARG, "MPI_Win_set_name: win_name is NULL");
    }
    // SAFETY: non-null and NUL-terminated, as the C caller vouches.
    w.set_name(&unsafe { c_name(name) });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_get_name(
    win: Raw,
    name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    let w = tri!(super::capi::win("MPI_Win_get_name", win));
    if name.is_null() || resultlen.is_null() {
        return err(
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

// MPI_Alloc_mem and MPI_Free_mem are runtime.rs's (merge of mpicore and mpitypes).

macro_rules! unsupported {
    ($($name:ident ( $($arg:ident : $t:ty),* ) => $why:literal;)*) => {$(
        /// Not provided: returns `MPI_ERR_UNSUPPORTED_OPERATION`.
        ///
        /// # Safety
        /// Never dereferences its arguments.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($(_: $t),*) -> c_int {
            err(MPI_ERR_UNSUPPORTED_OPERATION, concat!(stringify!($name), ": ", $why))
        }
    )*};
}

unsupported! {
    MPI_Win_allocate_shared(a: isize, b: c_int, c: Raw, d: Raw, e: *mut c_void, f: *mut Raw) =>
        "shared-memory windows are not supported (use MPI_Win_allocate)";
    MPI_Win_shared_query(a: Raw, b: c_int, c: *mut isize, d: *mut c_int, e: *mut c_void) =>
        "shared-memory windows are not supported";
    MPI_Win_create_dynamic(a: Raw, b: Raw, c: *mut Raw) => "dynamic windows are not supported";
    MPI_Win_attach(a: Raw, b: *mut c_void, c: isize) => "dynamic windows are not supported";
    MPI_Win_detach(a: Raw, b: *const c_void) => "dynamic windows are not supported";
    MPI_Win_post(a: Raw, b: c_int, c: Raw) =>
        "post/start/complete/wait synchronisation is not supported (use MPI_Win_fence or MPI_Win_lock)";
    MPI_Win_start(a: Raw, b: c_int, c: Raw) =>
        "post/start/complete/wait synchronisation is not supported (use MPI_Win_fence or MPI_Win_lock)";
    MPI_Win_complete(a: Raw) =>
        "post/start/complete/wait synchronisation is not supported (use MPI_Win_fence or MPI_Win_lock)";
    MPI_Win_wait(a: Raw) =>
        "post/start/complete/wait synchronisation is not supported (use MPI_Win_fence or MPI_Win_lock)";
    MPI_Win_test(a: Raw, b: *mut c_int) =>
        "post/start/complete/wait synchronisation is not supported (use MPI_Win_fence or MPI_Win_lock)";
    MPI_Rput(a: *const c_void, b: c_int, c: Raw, d: c_int, e: isize, f: c_int, g: Raw, h: Raw, i: *mut Raw) =>
        "request-based RMA is not supported (use MPI_Put and MPI_Win_flush)";
    MPI_Rget(a: *mut c_void, b: c_int, c: Raw, d: c_int, e: isize, f: c_int, g: Raw, h: Raw, i: *mut Raw) =>
        "request-based RMA is not supported (use MPI_Get and MPI_Win_flush)";
    MPI_Raccumulate(a: *const c_void, b: c_int, c: Raw, d: c_int, e: isize, f: c_int, g: Raw, h: Raw, i: Raw, j: *mut Raw) =>
        "request-based RMA is not supported (use MPI_Accumulate and MPI_Win_flush)";
    MPI_Rget_accumulate(a: *const c_void, b: c_int, c: Raw, d: *mut c_void, e: c_int, f: Raw, g: c_int, h: isize, i: c_int, j: Raw, k: Raw, l: Raw, m: *mut Raw) =>
        "request-based RMA is not supported (use MPI_Get_accumulate and MPI_Win_flush)";
}
