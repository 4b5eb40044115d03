//! MulticoreBSP for C's dialect (`include/mcbsp.h`, or `bsp.h` compiled with
//! `bspcc --mcbsp`): the header's `bsp_*` are inline wrappers of these `mcbsp_*`
//! functions, which take `unsigned` pids and `size_t` sizes, so a program gets the widths
//! it was written for and the `int` symbols are never called with them. Where MulticoreBSP
//! documents another behaviour than the `int` dialect, these follow it:
//!
//! - `bsp_get_tag` reports an empty queue as `(bsp_size_t)-1`, `bsp_hpmove` returns it;
//! - `bsp_move` on an empty queue does nothing;
//! - `bsp_qsize` accepts NULL for the byte count;
//! - `bsp_direct_get` reads now, not at the sync;
//! - outside an SPMD section `bsp_nprocs` is `mcbsp_set_maximum_threads`' value if the
//!   program set one.
//!
//! Functions whose C signature is the same in both dialects (`bsp_end`, `bsp_sync`,
//! `bsp_time`, `bsp_init`, `bsp_abort`, `bsp_vabort`) are shared; the `mcbsp_*` names are
//! exported too, for programs that call them directly. The affinity, profiling and
//! checkpointing calls are in `csrc/mcbsp.c`.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::bsp::{self as b, current, misuse, out, outside, with};

unsafe extern "C" {
    /// `mcbsp_set_maximum_threads`' value, 0 if never called (`csrc/mcbsp.c`).
    fn bulkwire_mcbsp_max_threads() -> usize;
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_begin(maxprocs: c_uint) {
    b::begin("bsp_begin", Some(maxprocs), &maxprocs)
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_end() {
    b::bsp_end()
}

/// # Safety
/// `spmd_part` must be a function the program may call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcbsp_init(
    spmd_part: Option<extern "C" fn()>,
    _argc: c_int,
    _argv: *mut *mut c_char,
) {
    b::init("bsp_init", spmd_part)
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_nprocs() -> c_uint {
    if current("bsp_nprocs").is_none() {
        crate::spmd::divert("bsp_nprocs");
        // SAFETY: a plain getter in the C shim.
        let max = unsafe { bulkwire_mcbsp_max_threads() };
        if max > 0 {
            return max.min(c_uint::MAX as usize) as c_uint;
        }
    }
    b::nprocs("bsp_nprocs")
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_pid() -> c_uint {
    match current("bsp_pid") {
        Some(rt) => rt.pid(),
        None => outside("bsp_pid"),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_time() -> f64 {
    b::bsp_time()
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_sync() {
    b::bsp_sync()
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_push_reg(address: *const c_void, size: usize) {
    with("bsp_push_reg", |rt| {
        rt.with(|c| c.push_reg(address as usize, size));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_pop_reg(address: *const c_void) {
    b::bsp_pop_reg(address)
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_put(
    pid: c_uint,
    src: *const c_void,
    dst: *const c_void,
    offset: usize,
    size: usize,
) {
    const CALL: &str = "bsp_put";
    with(CALL, |rt| {
        b::put(rt, CALL, false, pid, src, dst.cast_mut(), offset, size)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_hpput(
    pid: c_uint,
    src: *const c_void,
    dst: *const c_void,
    offset: usize,
    size: usize,
) {
    const CALL: &str = "bsp_hpput";
    with(CALL, |rt| {
        b::put(rt, CALL, true, pid, src, dst.cast_mut(), offset, size)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_get(
    pid: c_uint,
    src: *const c_void,
    offset: usize,
    dst: *mut c_void,
    size: usize,
) {
    const CALL: &str = "bsp_get";
    with(CALL, |rt| b::get(rt, CALL, pid, src, offset, dst, size))
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_hpget(
    pid: c_uint,
    src: *const c_void,
    offset: usize,
    dst: *mut c_void,
    size: usize,
) {
    const CALL: &str = "bsp_hpget";
    with(CALL, |rt| b::get(rt, CALL, pid, src, offset, dst, size))
}

/// # Safety
/// `dst` must be writable for `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcbsp_direct_get(
    pid: c_uint,
    src: *const c_void,
    offset: usize,
    dst: *mut c_void,
    size: usize,
) {
    const CALL: &str = "bsp_direct_get";
    with(CALL, |rt| {
        if size > 0 && dst.is_null() {
            return misuse(format!(
                "{CALL}: the destination is NULL but {size} bytes are to be written to it"
            ));
        }
        // SAFETY: the caller hands over `size` writable bytes at `dst`.
        unsafe { rt.direct_get(CALL, pid, src as usize, offset, dst.cast(), size) }
    })
}

/// # Safety
/// `size` must point to a `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcbsp_set_tagsize(size: *mut usize) {
    const CALL: &str = "bsp_set_tagsize";
    with(CALL, |rt| {
        let p = out(CALL, "the size pointer", size)?;
        // SAFETY: checked non-NULL; the caller hands over a size_t.
        unsafe { *p = rt.with(|c| c.set_tagsize(*p)) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_send(pid: c_uint, tag: *const c_void, payload: *const c_void, size: usize) {
    const CALL: &str = "bsp_send";
    with(CALL, |rt| b::send(rt, CALL, false, pid, tag, payload, size))
}

#[unsafe(no_mangle)]
pub extern "C" fn mcbsp_hpsend(
    pid: c_uint,
    tag: *const c_void,
    payload: *const c_void,
    size: usize,
) {
    const CALL: &str = "bsp_hpsend";
    with(CALL, |rt| b::send(rt, CALL, true, pid, tag, payload, size))
}

/// # Safety
/// `packets` must point to an `unsigned`, `accumulated_size` be NULL or point to a
/// `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcbsp_qsize(packets: *mut c_uint, accumulated_size: *mut usize) {
    const CALL: &str = "bsp_qsize";
    with(CALL, |rt| {
        let m = out(CALL, "the message count pointer", packets)?;
        let (n, bytes) = rt.with(|c| c.qsize());
        let n = c_uint::try_from(n).or_else(|_| {
            misuse(format!(
                "{CALL}: the message count ({n}) does not fit an unsigned"
            ))
        })?;
        // SAFETY: checked non-NULL, or NULL and skipped (MulticoreBSP allows it).
        unsafe {
            *m = n;
            if !accumulated_size.is_null() {
                *accumulated_size = bytes as usize;
            }
        }
        Ok(())
    })
}

/// # Safety
/// `status` must point to a `size_t`, `tag` to the tag size of writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcbsp_get_tag(status: *mut usize, tag: *mut c_void) {
    const CALL: &str = "bsp_get_tag";
    with(CALL, |rt| {
        let st = out(CALL, "the status pointer", status)?;
        let v = b::get_tag(CALL, rt, tag)?.unwrap_or(usize::MAX);
        // SAFETY: checked non-NULL.
        unsafe { *st = v };
        Ok(())
    })
}

/// # Safety
/// `payload` must be writable for `max_copy_size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcbsp_move(payload: *mut c_void, max_copy_size: usize) {
    const CALL: &str = "bsp_move";
    // An empty queue: nothing to move, as MulticoreBSP documents.
    with(CALL, |rt| {
        b::move_first(CALL, rt, payload, max_copy_size).map(drop)
    })
}

/// # Safety
/// Both pointers must point to writable `void *`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcbsp_hpmove(
    tag_ptr: *mut *mut c_void,
    payload_ptr: *mut *mut c_void,
) -> usize {
    const CALL: &str = "bsp_hpmove";
    with(CALL, |rt| {
        Ok(b::hpmove(CALL, rt, tag_ptr, payload_ptr)?.unwrap_or(usize::MAX))
    })
}
