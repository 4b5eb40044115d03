//! The C functions of datatypes: `MPI_Type_*`, `MPI_Pack*`, `MPI_Get_address`,
//! `MPI_Aint_*`, `MPI_Get_elements*`. Each checks its handles and arguments and reports a
//! problem through `MPI_COMM_WORLD`'s error handler (datatype calls have no communicator).

use std::ffi::{CStr, c_char, c_void};
use std::fmt::Display;
use std::os::raw::c_int;
use std::sync::Arc;

use super::attr;
use super::build;
use super::*;
use crate::handle::Raw;

const MPI_COMM_WORLD: Raw = 0x101;
const MPI_UNDEFINED: c_int = -32766;
const MPI_MAX_OBJECT_NAME: usize = 128;

fn err(call: &str, code: c_int, what: impl Display) -> c_int {
    crate::runtime::fail(MPI_COMM_WORLD, code, format!("{call}: {what}"))
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

fn get(call: &str, h: Raw) -> Result<Arc<Datatype>, c_int> {
    lookup(h).map_err(|code| {
        let what = if h == MPI_DATATYPE_NULL {
            "the datatype is MPI_DATATYPE_NULL".to_string()
        } else {
            format!("{h:#x} is not a datatype (freed, or a handle of another kind)")
        };
        err(call, code, what)
    })
}

fn nonneg(call: &str, what: &str, n: c_int) -> Result<usize, c_int> {
    usize::try_from(n).map_err(|_| err(call, MPI_ERR_COUNT, format_args!("{what} {n} is negative")))
}

/// `n` values at `p`, which may be null only when `n` is 0.
///
/// # Safety
/// A non-null `p` points to `n` readable values.
unsafe fn slice<'a, T>(call: &str, what: &str, p: *const T, n: usize) -> Result<&'a [T], c_int> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(err(call, MPI_ERR_ARG, format_args!("{what} is NULL")));
    }
    // SAFETY: non-null, and the caller vouches for n values.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Writes `v` to the output argument `p`.
///
/// # Safety
/// A non-null `p` is writable.
unsafe fn out<T>(call: &str, what: &str, p: *mut T, v: T) -> Result<(), c_int> {
    if p.is_null() {
        return Err(err(
            call,
            MPI_ERR_ARG,
            format_args!("the output argument {what} is NULL"),
        ));
    }
    // SAFETY: non-null and writable, as the caller vouches.
    unsafe { p.write(v) };
    Ok(())
}

fn checked_out(call: &str, newtype: *mut Raw) -> Result<(), c_int> {
    if newtype.is_null() {
        return Err(err(
            call,
            MPI_ERR_ARG,
            "the output argument newtype is NULL",
        ));
    }
    Ok(())
}

/// Registers a constructor's result and writes its handle.
///
/// # Safety
/// `newtype` is non-null (checked before) and writable.
unsafe fn finish(call: &str, r: Result<Datatype, c_int>, newtype: *mut Raw) -> c_int {
    match r {
        Ok(t) => {
            // SAFETY: checked non-null by the caller; writable as the C caller vouches.
            unsafe { newtype.write(register(Arc::new(t))) };
            MPI_SUCCESS
        }
        Err(code) => {
            let what = match code {
                MPI_ERR_NO_MEM => "the type's description does not fit in memory",
                MPI_ERR_DIMS => "ndims must be positive",
                MPI_ERR_COUNT => "a block length is negative",
                _ => {
                    "invalid arguments (an array bound outside the array, an unknown order or distribution, or an overflowing displacement)"
                }
            };
            err(call, code, what)
        }
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_contiguous")]
pub unsafe extern "C" fn MPI_Type_contiguous(
    count: c_int,
    oldtype: Raw,
    newtype: *mut Raw,
) -> c_int {
    let call = "MPI_Type_contiguous";
    tri!(nonneg(call, "count", count));
    let old = tri!(get(call, oldtype));
    tri!(checked_out(call, newtype));
    // SAFETY: newtype checked.
    unsafe { finish(call, build::contiguous(count, &old), newtype) }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_vector")]
pub unsafe extern "C" fn MPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    oldtype: Raw,
    newtype: *mut Raw,
) -> c_int {
    let call = "MPI_Type_vector";
    tri!(nonneg(call, "count", count));
    tri!(nonneg(call, "blocklength", blocklength));
    let old = tri!(get(call, oldtype));
    tri!(checked_out(call, newtype));
    // SAFETY: newtype checked.
    unsafe {
        finish(
            call,
            build::vector(count, blocklength, stride as isize, false, &old),
            newtype,
        )
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_create_hvector")]
pub unsafe extern "C" fn MPI_Type_create_hvector(
    count: c_int,
    blocklength: c_int,
    stride: isize,
    oldtype: Raw,
    newtype: *mut Raw,
) -> c_int {
    let call = "MPI_Type_create_hvector";
    tri!(nonneg(call, "count", count));
    tri!(nonneg(call, "blocklength", blocklength));
    let old = tri!(get(call, oldtype));
    tri!(checked_out(call, newtype));
    // SAFETY: newtype checked.
    unsafe {
        finish(
            call,
            build::vector(count, blocklength, stride, true, &old),
            newtype,
        )
    }
}

/// Shared by the four indexed constructors.
///
/// # Safety
/// `lens` holds `count` values (one if `block`), `disps` `count`.
#[allow(clippy::too_many_arguments)]
unsafe fn indexed_common<D: Copy + Into<i64>>(
    call: &str,
    count: c_int,
    lens: *const c_int,
    disps: *const D,
    bytes: bool,
    block: bool,
    oldtype: Raw,
    newtype: *mut Raw,
) -> c_int {
    let n = tri!(nonneg(call, "count", count));
    // SAFETY: the caller vouches for the arrays' lengths.
    let lens = tri!(unsafe {
        slice(
            call,
            "array_of_blocklengths",
            lens,
            if block { 1 } else { n },
        )
    });
    // SAFETY: as above.
    let disps = tri!(unsafe { slice(call, "array_of_displacements", disps, n) });
    for &l in lens {
        tri!(nonneg(call, "a block length", l));
    }
    let old = tri!(get(call, oldtype));
    tri!(checked_out(call, newtype));
    let d: Vec<isize> = disps.iter().map(|&d| d.into() as isize).collect();
    // SAFETY: newtype checked.
    unsafe { finish(call, build::indexed(lens, &d, bytes, block, &old), newtype) }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_indexed")]
pub unsafe extern "C" fn MPI_Type_indexed(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const c_int,
    oldtype: Raw,
    newtype: *mut Raw,
) -> c_int {
    // SAFETY: forwarded from the C caller.
    unsafe {
        indexed_common(
            "MPI_Type_indexed",
            count,
            blocklengths,
            displacements,
            false,
            false,
            oldtype,
            newtype,
        )
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_create_hindexed")]
pub unsafe extern "C" fn MPI_Type_create_hindexed(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const isize,
    oldtype: Raw,
    newtype: *mut Raw,
) -> c_int {
    let d = displacements as *const i64;
    // SAFETY: forwarded from the C caller; MPI_Aint is 64 bits here.
    unsafe {
        indexed_common(
            "MPI_Type_create_hindexed",
            count,
            blocklengths,
            d,
            true,
            false,
            oldtype,
            newtype,
        )
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_create_indexed_block")]
pub unsafe extern "C" fn MPI_Type_create_indexed_block(
    count: c_int,
    blocklength: c_int,
    displacements: *const c_int,
    oldtype: Raw,
    newtype: *mut Raw,
) -> c_int {
    // SAFETY: forwarded from the C caller; the one block length lives on this stack.
    unsafe {
        indexed_common(
            "MPI_Type_create_indexed_block",
            count,
            &blocklength,
            displacements,
            false,
            true,
            oldtype,
            newtype,
        )
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_create_hindexed_block")]
pub unsafe extern "C" fn MPI_Type_create_hindexed_block(
    count: c_int,
    blocklength: c_int,
    displacements: *const isize,
    oldtype: Raw,
    newtype: *mut Raw,
) -> c_int {
    let d = displacements as *const i64;
    // SAFETY: forwarded from the C caller; MPI_Aint is 64 bits here.
    unsafe {
        indexed_common(
            "MPI_Type_create_hindexed_block",
            count,
            &blocklength,
            d,
            true,
            true,
            oldtype,
            newtype,
        )
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_create_struct")]
pub unsafe extern "C" fn MPI_Type_create_struct(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const isize,
    types: *const Raw,
    newtype: *mut Raw,
) -> c_int {
    let call = "MPI_Type_create_struct";
    let n = tri!(nonneg(call, "count", count));
    // SAFETY: the C caller vouches for count values in each array.
    let (lens, disps, hs) = unsafe {
        (
            tri!(slice(call, "array_of_blocklengths", blocklengths, n)),
            tri!(slice(call, "array_of_displacements", displacements, n)),
            tri!(slice(call, "array_of_types", types, n)),
        )
    };
    for &l in lens {
        tri!(nonneg(call, "a block length", l));
    }
    let mut ts = Vec::with_capacity(n);
    for &h in hs {
        ts.push(tri!(get(call, h)));
    }
    tri!(checked_out(call, newtype));
    // SAFETY: newtype checked.
    unsafe { finish(call, build::structure(lens, disps, &ts), newtype) }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_create_subarray")]
pub unsafe extern "C" fn MPI_Type_create_subarray(
    ndims: c_int,
    sizes: *const c_int,
    subsizes: *const c_int,
    starts: *const c_int,
    order: c_int,
    oldtype: Raw,
    newtype: *mut Raw,
) -> c_int {
    let call = "MPI_Type_create_subarray";
    if ndims < 1 {
        return err(
            call,
            MPI_ERR_DIMS,
            format_args!("ndims {ndims} must be positive"),
        );
    }
    let n = ndims as usize;
    // SAFETY: the C caller vouches for ndims values in each array.
    let (a, b, c) = unsafe {
        (
            tri!(slice(call, "array_of_sizes", sizes, n)),
            tri!(slice(call, "array_of_subsizes", subsizes, n)),
            tri!(slice(call, "array_of_starts", starts, n)),
        )
    };
    let old = tri!(get(call, oldtype));
    tri!(checked_out(call, newtype));
    // SAFETY: newtype checked.
    unsafe { finish(call, build::subarray(a, b, c, order, &old), newtype) }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_create_darray")]
pub unsafe extern "C" fn MPI_Type_create_darray(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    gsizes: *const c_int,
    distribs: *const c_int,
    dargs: *const c_int,
    psizes: *const c_int,
    order: c_int,
    oldtype: Raw,
    newtype: *mut Raw,
) -> c_int {
    let call = "MPI_Type_create_darray";
    if ndims < 1 {
        return err(
            call,
            MPI_ERR_DIMS,
            format_args!("ndims {ndims} must be positive"),
        );
    }
    let n = ndims as usize;
    // SAFETY: the C caller vouches for ndims values in each array.
    let (g, d, a, p) = unsafe {
        (
            tri!(slice(call, "array_of_gsizes", gsizes, n)),
            tri!(slice(call, "array_of_distribs", distribs, n)),
            tri!(slice(call, "array_of_dargs", dargs, n)),
            tri!(slice(call, "array_of_psizes", psizes, n)),
        )
    };
    let old = tri!(get(call, oldtype));
    tri!(checked_out(call, newtype));
    // SAFETY: newtype checked.
    unsafe {
        finish(
            call,
            build::darray(size, rank, g, d, a, p, order, &old),
            newtype,
        )
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_create_resized")]
pub unsafe extern "C" fn MPI_Type_create_resized(
    oldtype: Raw,
    lb: isize,
    extent: isize,
    newtype: *mut Raw,
) -> c_int {
    let call = "MPI_Type_create_resized";
    let old = tri!(get(call, oldtype));
    tri!(checked_out(call, newtype));
    // SAFETY: newtype checked.
    unsafe { finish(call, build::resized(&old, lb, extent), newtype) }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_dup")]
pub unsafe extern "C" fn MPI_Type_dup(oldtype: Raw, newtype: *mut Raw) -> c_int {
    let call = "MPI_Type_dup";
    let old = tri!(get(call, oldtype));
    tri!(checked_out(call, newtype));
    let new = Arc::new(build::dup(&old));
    if let Err(c) = old.attrs.copy_to(oldtype, &new.attrs) {
        return err(call, c, "an attribute's copy callback failed");
    }
    // SAFETY: newtype checked.
    unsafe { newtype.write(register(new)) };
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_commit")]
pub unsafe extern "C" fn MPI_Type_commit(datatype: *mut Raw) -> c_int {
    let call = "MPI_Type_commit";
    if datatype.is_null() {
        return err(call, MPI_ERR_ARG, "datatype is NULL");
    }
    // SAFETY: non-null; the C caller passes the address of a handle.
    let t = tri!(get(call, unsafe { *datatype }));
    t.commit();
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_free")]
pub unsafe extern "C" fn MPI_Type_free(datatype: *mut Raw) -> c_int {
    let call = "MPI_Type_free";
    if datatype.is_null() {
        return err(call, MPI_ERR_ARG, "datatype is NULL");
    }
    // SAFETY: non-null; the C caller passes the address of a handle.
    let h = unsafe { *datatype };
    let t = tri!(get(call, h));
    if let Some(h) = t.named() {
        let name = t.name();
        return err(
            call,
            MPI_ERR_TYPE,
            format_args!("{name} ({h:#x}) is predefined and cannot be freed"),
        );
    }
    if let Err(c) = t.attrs.delete_all(h) {
        return err(call, c, "an attribute's delete callback failed");
    }
    tri!(release(h).map_err(|c| err(call, c, "the datatype was freed already")));
    // SAFETY: as above.
    unsafe { *datatype = MPI_DATATYPE_NULL };
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_size")]
pub unsafe extern "C" fn MPI_Type_size(datatype: Raw, size: *mut c_int) -> c_int {
    let call = "MPI_Type_size";
    let t = tri!(get(call, datatype));
    let v = c_int::try_from(t.size()).unwrap_or(MPI_UNDEFINED);
    // SAFETY: the C caller passes a writable int (null is checked).
    tri!(unsafe { out(call, "size", size, v) });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_size_x")]
pub unsafe extern "C" fn MPI_Type_size_x(datatype: Raw, size: *mut i64) -> c_int {
    let call = "MPI_Type_size_x";
    let t = tri!(get(call, datatype));
    // SAFETY: the C caller passes a writable MPI_Count (null is checked).
    tri!(unsafe { out(call, "size", size, t.size() as i64) });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_size_c(datatype: Raw, size: *mut i64) -> c_int {
    // SAFETY: forwarded.
    unsafe { MPI_Type_size_x(datatype, size) }
}

/// # Safety
/// `a` and `b` are writable (null is checked).
unsafe fn two_out<T>(call: &str, names: (&str, &str), a: *mut T, av: T, b: *mut T, bv: T) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        tri!(out(call, names.0, a, av));
        tri!(out(call, names.1, b, bv));
    }
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_get_extent")]
pub unsafe extern "C" fn MPI_Type_get_extent(
    datatype: Raw,
    lb: *mut isize,
    extent: *mut isize,
) -> c_int {
    let call = "MPI_Type_get_extent";
    let t = tri!(get(call, datatype));
    // SAFETY: the C caller passes writable outputs.
    unsafe { two_out(call, ("lb", "extent"), lb, t.lb(), extent, t.extent()) }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_get_extent_x")]
pub unsafe extern "C" fn MPI_Type_get_extent_x(
    datatype: Raw,
    lb: *mut i64,
    extent: *mut i64,
) -> c_int {
    let call = "MPI_Type_get_extent_x";
    let t = tri!(get(call, datatype));
    // SAFETY: the C caller passes writable outputs.
    unsafe {
        two_out(
            call,
            ("lb", "extent"),
            lb,
            t.lb() as i64,
            extent,
            t.extent() as i64,
        )
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_extent_c(
    datatype: Raw,
    lb: *mut i64,
    extent: *mut i64,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { MPI_Type_get_extent_x(datatype, lb, extent) }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_get_true_extent")]
pub unsafe extern "C" fn MPI_Type_get_true_extent(
    datatype: Raw,
    lb: *mut isize,
    extent: *mut isize,
) -> c_int {
    let call = "MPI_Type_get_true_extent";
    let t = tri!(get(call, datatype));
    // SAFETY: the C caller passes writable outputs.
    unsafe {
        two_out(
            call,
            ("true_lb", "true_extent"),
            lb,
            t.true_lb(),
            extent,
            t.true_extent(),
        )
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_get_true_extent_x")]
pub unsafe extern "C" fn MPI_Type_get_true_extent_x(
    datatype: Raw,
    lb: *mut i64,
    extent: *mut i64,
) -> c_int {
    let call = "MPI_Type_get_true_extent_x";
    let t = tri!(get(call, datatype));
    // SAFETY: the C caller passes writable outputs.
    unsafe {
        two_out(
            call,
            ("true_lb", "true_extent"),
            lb,
            t.true_lb() as i64,
            extent,
            t.true_extent() as i64,
        )
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_true_extent_c(
    datatype: Raw,
    lb: *mut i64,
    extent: *mut i64,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { MPI_Type_get_true_extent_x(datatype, lb, extent) }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Get_address")]
pub unsafe extern "C" fn MPI_Get_address(location: *const c_void, address: *mut isize) -> c_int {
    // SAFETY: the C caller passes a writable MPI_Aint.
    tri!(unsafe { out("MPI_Get_address", "address", address, location as isize) });
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Aint_add")]
pub extern "C" fn MPI_Aint_add(base: isize, disp: isize) -> isize {
    base.wrapping_add(disp)
}

#[unsafe(export_name = "PMPI_Aint_diff")]
pub extern "C" fn MPI_Aint_diff(addr1: isize, addr2: isize) -> isize {
    addr1.wrapping_sub(addr2)
}

fn committed(call: &str, t: &Datatype) -> Result<(), c_int> {
    if t.committed() {
        Ok(())
    } else {
        Err(err(
            call,
            MPI_ERR_TYPE,
            "the datatype is not committed (MPI_Type_commit)",
        ))
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Pack")]
pub unsafe extern "C" fn MPI_Pack(
    inbuf: *const c_void,
    incount: c_int,
    datatype: Raw,
    outbuf: *mut c_void,
    outsize: c_int,
    position: *mut c_int,
    _comm: Raw,
) -> c_int {
    let call = "MPI_Pack";
    let n = tri!(nonneg(call, "incount", incount));
    let t = tri!(get(call, datatype));
    tri!(committed(call, &t));
    if position.is_null() {
        return err(call, MPI_ERR_ARG, "position is NULL");
    }
    // SAFETY: non-null; the C caller passes a readable and writable int.
    let pos = unsafe { *position };
    let bytes = t.size() as u64 * n as u64;
    if pos < 0 || outsize < 0 || pos as u64 + bytes > outsize as u64 {
        return err(
            call,
            MPI_ERR_TRUNCATE,
            format_args!(
                "{bytes} bytes at position {pos} do not fit in the output buffer of {outsize} bytes"
            ),
        );
    }
    if bytes > 0 {
        if outbuf.is_null() {
            return err(call, MPI_ERR_BUFFER, "outbuf is NULL");
        }
        // SAFETY: [pos, pos+bytes) lies inside the outsize bytes at outbuf (checked above).
        let dst = unsafe {
            std::slice::from_raw_parts_mut((outbuf as *mut u8).add(pos as usize), bytes as usize)
        };
        // SAFETY: the C caller vouches for incount elements of the type at inbuf.
        unsafe { t.pack_into(inbuf as *const u8, n, 0, dst) };
    }
    // SAFETY: as above.
    unsafe { *position = pos + bytes as c_int };
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Unpack")]
pub unsafe extern "C" fn MPI_Unpack(
    inbuf: *const c_void,
    insize: c_int,
    position: *mut c_int,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: Raw,
    _comm: Raw,
) -> c_int {
    let call = "MPI_Unpack";
    let n = tri!(nonneg(call, "outcount", outcount));
    let t = tri!(get(call, datatype));
    tri!(committed(call, &t));
    if position.is_null() {
        return err(call, MPI_ERR_ARG, "position is NULL");
    }
    // SAFETY: non-null; the C caller passes a readable and writable int.
    let pos = unsafe { *position };
    let bytes = t.size() as u64 * n as u64;
    if pos < 0 || insize < 0 || pos as u64 + bytes > insize as u64 {
        return err(
            call,
            MPI_ERR_TRUNCATE,
            format_args!(
                "{bytes} bytes at position {pos} run past the input buffer of {insize} bytes"
            ),
        );
    }
    if bytes > 0 {
        if inbuf.is_null() {
            return err(call, MPI_ERR_BUFFER, "inbuf is NULL");
        }
        // SAFETY: [pos, pos+bytes) lies inside the insize bytes at inbuf (checked above).
        let src = unsafe {
            std::slice::from_raw_parts((inbuf as *const u8).add(pos as usize), bytes as usize)
        };
        // SAFETY: the C caller vouches for outcount writable elements at outbuf.
        unsafe { t.unpack(src, outbuf as *mut u8, n) };
    }
    // SAFETY: as above.
    unsafe { *position = pos + bytes as c_int };
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Pack_size")]
pub unsafe extern "C" fn MPI_Pack_size(
    incount: c_int,
    datatype: Raw,
    _comm: Raw,
    size: *mut c_int,
) -> c_int {
    let call = "MPI_Pack_size";
    let n = tri!(nonneg(call, "incount", incount));
    let t = tri!(get(call, datatype));
    let Ok(v) = c_int::try_from(t.size() as u64 * n as u64) else {
        return err(
            call,
            MPI_ERR_ARG,
            format_args!("{incount} elements of {} bytes exceed an int", t.size()),
        );
    };
    // SAFETY: the C caller passes a writable int.
    tri!(unsafe { out(call, "size", size, v) });
    MPI_SUCCESS
}

/// Whether `datarep` names the one representation provided, `external32`.
///
/// # Safety
/// `datarep` is null or NUL-terminated.
unsafe fn external32(call: &str, datarep: *const c_char) -> Result<(), c_int> {
    // SAFETY: non-null strings are NUL-terminated, as the C caller vouches.
    let ok = !datarep.is_null() && unsafe { CStr::from_ptr(datarep) }.to_bytes() == b"external32";
    if ok {
        Ok(())
    } else {
        Err(err(
            call,
            MPI_ERR_UNSUPPORTED_DATAREP,
            "the data representation must be \"external32\"",
        ))
    }
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Pack_external")]
pub unsafe extern "C" fn MPI_Pack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: c_int,
    datatype: Raw,
    outbuf: *mut c_void,
    outsize: isize,
    position: *mut isize,
) -> c_int {
    let call = "MPI_Pack_external";
    // SAFETY: forwarded.
    tri!(unsafe { external32(call, datarep) });
    let n = tri!(nonneg(call, "incount", incount));
    let t = tri!(get(call, datatype));
    tri!(committed(call, &t));
    if position.is_null() {
        return err(call, MPI_ERR_ARG, "position is NULL");
    }
    // SAFETY: non-null.
    let pos = unsafe { *position };
    let Some(bytes) = t.external_size(n) else {
        return err(
            call,
            MPI_ERR_UNSUPPORTED_DATAREP,
            "long double has no external32 form here",
        );
    };
    if pos < 0 || outsize < 0 || pos as u64 + bytes as u64 > outsize as u64 {
        return err(
            call,
            MPI_ERR_TRUNCATE,
            format_args!(
                "{bytes} bytes at position {pos} do not fit in the output buffer of {outsize} bytes"
            ),
        );
    }
    let mut v = Vec::with_capacity(bytes);
    // SAFETY: the C caller vouches for incount elements at inbuf.
    let r = unsafe { t.pack_external(inbuf as *const u8, n, &mut v) };
    tri!(r.map_err(|c| err(call, c, "conversion failed")));
    if bytes > 0 {
        if outbuf.is_null() {
            return err(call, MPI_ERR_BUFFER, "outbuf is NULL");
        }
        // SAFETY: [pos, pos+bytes) lies inside the outsize bytes at outbuf (checked).
        unsafe {
            std::ptr::copy_nonoverlapping(v.as_ptr(), (outbuf as *mut u8).add(pos as usize), bytes)
        };
    }
    // SAFETY: non-null.
    unsafe { *position = pos + bytes as isize };
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Unpack_external")]
pub unsafe extern "C" fn MPI_Unpack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: isize,
    position: *mut isize,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: Raw,
) -> c_int {
    let call = "MPI_Unpack_external";
    // SAFETY: forwarded.
    tri!(unsafe { external32(call, datarep) });
    let n = tri!(nonneg(call, "outcount", outcount));
    let t = tri!(get(call, datatype));
    tri!(committed(call, &t));
    if position.is_null() {
        return err(call, MPI_ERR_ARG, "position is NULL");
    }
    // SAFETY: non-null.
    let pos = unsafe { *position };
    let Some(bytes) = t.external_size(n) else {
        return err(
            call,
            MPI_ERR_UNSUPPORTED_DATAREP,
            "long double has no external32 form here",
        );
    };
    if pos < 0 || insize < 0 || pos as u64 + bytes as u64 > insize as u64 {
        return err(
            call,
            MPI_ERR_TRUNCATE,
            format_args!(
                "{bytes} bytes at position {pos} run past the input buffer of {insize} bytes"
            ),
        );
    }
    if bytes > 0 {
        if inbuf.is_null() {
            return err(call, MPI_ERR_BUFFER, "inbuf is NULL");
        }
        // SAFETY: [pos, pos+bytes) lies inside the insize bytes at inbuf (checked).
        let src =
            unsafe { std::slice::from_raw_parts((inbuf as *const u8).add(pos as usize), bytes) };
        // SAFETY: the C caller vouches for outcount writable elements at outbuf.
        let r = unsafe { t.unpack_external(src, outbuf as *mut u8, n) };
        tri!(r.map_err(|c| err(call, c, "conversion failed")));
    }
    // SAFETY: non-null.
    unsafe { *position = pos + bytes as isize };
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Pack_external_size")]
pub unsafe extern "C" fn MPI_Pack_external_size(
    datarep: *const c_char,
    incount: c_int,
    datatype: Raw,
    size: *mut isize,
) -> c_int {
    let call = "MPI_Pack_external_size";
    // SAFETY: forwarded.
    tri!(unsafe { external32(call, datarep) });
    let n = tri!(nonneg(call, "incount", incount));
    let t = tri!(get(call, datatype));
    let Some(bytes) = t.external_size(n) else {
        return err(
            call,
            MPI_ERR_UNSUPPORTED_DATAREP,
            "long double has no external32 form here",
        );
    };
    // SAFETY: the C caller passes a writable MPI_Aint.
    tri!(unsafe { out(call, "size", size, bytes as isize) });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_get_envelope")]
pub unsafe extern "C" fn MPI_Type_get_envelope(
    datatype: Raw,
    num_integers: *mut c_int,
    num_addresses: *mut c_int,
    num_datatypes: *mut c_int,
    combiner: *mut c_int,
) -> c_int {
    let call = "MPI_Type_get_envelope";
    let t = tri!(get(call, datatype));
    let (ni, na, nd, c) = match t.envelope() {
        None => (0, 0, 0, MPI_COMBINER_NAMED),
        Some(e) => (e.ints.len(), e.addrs.len(), e.types.len(), e.combiner),
    };
    // SAFETY: the C caller passes writable ints.
    unsafe {
        tri!(out(call, "num_integers", num_integers, ni as c_int));
        tri!(out(call, "num_addresses", num_addresses, na as c_int));
        tri!(out(call, "num_datatypes", num_datatypes, nd as c_int));
        tri!(out(call, "combiner", combiner, c));
    }
    MPI_SUCCESS
}

/// The inner types come back as their predefined handles or as new handles the caller
/// frees, as the standard asks.
///
/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_get_contents")]
pub unsafe extern "C" fn MPI_Type_get_contents(
    datatype: Raw,
    max_integers: c_int,
    max_addresses: c_int,
    max_datatypes: c_int,
    integers: *mut c_int,
    addresses: *mut isize,
    datatypes: *mut Raw,
) -> c_int {
    let call = "MPI_Type_get_contents";
    let t = tri!(get(call, datatype));
    let Some(e) = t.envelope() else {
        return err(
            call,
            MPI_ERR_ARG,
            "a predefined type has no contents (its combiner is MPI_COMBINER_NAMED)",
        );
    };
    if (max_integers as i64) < e.ints.len() as i64
        || (max_addresses as i64) < e.addrs.len() as i64
        || (max_datatypes as i64) < e.types.len() as i64
    {
        return err(
            call,
            MPI_ERR_ARG,
            format_args!(
                "the arrays are too short: {} integers, {} addresses and {} datatypes needed",
                e.ints.len(),
                e.addrs.len(),
                e.types.len()
            ),
        );
    }
    for (p, n, what) in [
        (integers.is_null(), e.ints.len(), "array_of_integers"),
        (addresses.is_null(), e.addrs.len(), "array_of_addresses"),
        (datatypes.is_null(), e.types.len(), "array_of_datatypes"),
    ] {
        if p && n > 0 {
            return err(call, MPI_ERR_ARG, format_args!("{what} is NULL"));
        }
    }
    // SAFETY: each array is non-null where written and long enough (checked above).
    unsafe {
        std::ptr::copy_nonoverlapping(e.ints.as_ptr(), integers, e.ints.len());
        std::ptr::copy_nonoverlapping(e.addrs.as_ptr(), addresses, e.addrs.len());
        for (i, ty) in e.types.iter().enumerate() {
            let h = ty.named().unwrap_or_else(|| register(ty.clone()));
            datatypes.add(i).write(h);
        }
    }
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_set_name")]
pub unsafe extern "C" fn MPI_Type_set_name(datatype: Raw, name: *const c_char) -> c_int {
    let call = "MPI_Type_set_name";
    let t = tri!(get(call, datatype));
    if name.is_null() {
        return err(call, MPI_ERR_ARG, "type_name is NULL");
    }
    // SAFETY: non-null; the C caller passes a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    let mut end = s.len().min(MPI_MAX_OBJECT_NAME - 1);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    t.set_name(&s[..end]);
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_get_name")]
pub unsafe extern "C" fn MPI_Type_get_name(
    datatype: Raw,
    name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    let call = "MPI_Type_get_name";
    let t = tri!(get(call, datatype));
    if name.is_null() || resultlen.is_null() {
        return err(call, MPI_ERR_ARG, "type_name or resultlen is NULL");
    }
    let s = t.name();
    let n = s.len().min(MPI_MAX_OBJECT_NAME - 1);
    // SAFETY: the C caller passes MPI_MAX_OBJECT_NAME writable chars and a writable int.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr() as *const c_char, name, n);
        *name.add(n) = 0;
        *resultlen = n as c_int;
    }
    MPI_SUCCESS
}

const MPI_TYPECLASS_LOGICAL: c_int = 191;
const MPI_TYPECLASS_INTEGER: c_int = 192;
const MPI_TYPECLASS_REAL: c_int = 193;
const MPI_TYPECLASS_COMPLEX: c_int = 194;

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Type_match_size")]
pub unsafe extern "C" fn MPI_Type_match_size(
    typeclass: c_int,
    size: c_int,
    datatype: *mut Raw,
) -> c_int {
    let call = "MPI_Type_match_size";
    let h: Option<Raw> = match (typeclass, size) {
        (MPI_TYPECLASS_INTEGER, 1) => Some(0x2c1),
        (MPI_TYPECLASS_INTEGER, 2) => Some(0x2c9),
        (MPI_TYPECLASS_INTEGER, 4) => Some(0x2d1),
        (MPI_TYPECLASS_INTEGER, 8) => Some(0x2d9),
        (MPI_TYPECLASS_LOGICAL, 1) => Some(0x2c0),
        (MPI_TYPECLASS_LOGICAL, 2) => Some(0x2c8),
        (MPI_TYPECLASS_LOGICAL, 4) => Some(0x2d0),
        (MPI_TYPECLASS_LOGICAL, 8) => Some(0x2d8),
        (MPI_TYPECLASS_REAL, 4) => Some(0x2d2),
        (MPI_TYPECLASS_REAL, 8) => Some(0x2da),
        (MPI_TYPECLASS_COMPLEX, 8) => Some(0x2db),
        (MPI_TYPECLASS_COMPLEX, 16) => Some(0x2e3),
        // No Fortran type of these sizes is provided: C's `long double` (and its complex)
        // is the predefined type of the size, as MPI-3.1 17.1.9 allows any.
        (MPI_TYPECLASS_REAL, n) if n as usize == Basic::LongDouble.size() => Some(0x220),
        (MPI_TYPECLASS_COMPLEX, n) if n as usize == Basic::CLongDoubleComplex.size() => Some(0x224),
        _ => None,
    };
    let Some(h) = h else {
        return err(
            call,
            MPI_ERR_ARG,
            format_args!("no predefined type of class {typeclass} has {size} bytes"),
        );
    };
    // SAFETY: the C caller passes a writable handle.
    tri!(unsafe { out(call, "datatype", datatype, h) });
    MPI_SUCCESS
}

/// `MPI_Type_get_value_index`: the predefined pair type of a value and an index type,
/// `MPI_DATATYPE_NULL` when there is none.
///
/// # Safety
/// The C caller passes valid pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_value_index(
    value_type: Raw,
    index_type: Raw,
    pair_type: *mut Raw,
) -> c_int {
    let call = "MPI_Type_get_value_index";
    tri!(get(call, value_type));
    tri!(get(call, index_type));
    let h = match (value_type, index_type) {
        (0x210, 0x209) => 0x228,
        (0x214, 0x209) => 0x229,
        (0x20a, 0x209) => 0x22a,
        (0x209, 0x209) => 0x22b,
        (0x208, 0x209) => 0x22c,
        (0x220, 0x209) => 0x22d,
        (0x21a, 0x21a) => 0x230,
        (0x21c, 0x21c) => 0x231,
        (0x219, 0x219) => 0x232,
        _ => MPI_DATATYPE_NULL,
    };
    // SAFETY: the C caller passes a writable handle.
    tri!(unsafe { out(call, "pair_type", pair_type, h) });
    MPI_SUCCESS
}

/// The basic elements in a received message's bytes, `None` when they end inside one.
///
/// # Safety
/// `status` is null or points to an `MPI_Status`.
unsafe fn elements(call: &str, status: *const c_void, datatype: Raw) -> Result<Option<u64>, c_int> {
    if status.is_null() {
        return Err(err(call, MPI_ERR_ARG, "status is MPI_STATUS_IGNORE"));
    }
    let t = get(call, datatype)?;
    // SAFETY: non-null; the C caller passes an MPI_Status.
    let bytes = unsafe { (*(status as *const crate::request::MpiStatus)).bytes() };
    Ok(t.elements(bytes.max(0) as u64))
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Get_elements")]
pub unsafe extern "C" fn MPI_Get_elements(
    status: *const c_void,
    datatype: Raw,
    count: *mut c_int,
) -> c_int {
    let call = "MPI_Get_elements";
    // SAFETY: forwarded from the C caller.
    let n = tri!(unsafe { elements(call, status, datatype) });
    let v = n
        .and_then(|n| c_int::try_from(n).ok())
        .unwrap_or(MPI_UNDEFINED);
    // SAFETY: the C caller passes a writable int.
    tri!(unsafe { out(call, "count", count, v) });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(export_name = "PMPI_Get_elements_x")]
pub unsafe extern "C" fn MPI_Get_elements_x(
    status: *const c_void,
    datatype: Raw,
    count: *mut i64,
) -> c_int {
    let call = "MPI_Get_elements_x";
    // SAFETY: forwarded from the C caller.
    let n = tri!(unsafe { elements(call, status, datatype) });
    let v = n.map_or(MPI_UNDEFINED as i64, |n| n as i64);
    // SAFETY: the C caller passes a writable MPI_Count.
    tri!(unsafe { out(call, "count", count, v) });
    MPI_SUCCESS
}

/// # Safety
/// The C caller passes valid pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_elements_c(
    status: *const c_void,
    datatype: Raw,
    count: *mut i64,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { MPI_Get_elements_x(status, datatype, count) }
}

/// Handles are ints already (run-time handles stay far below `INT_MAX`).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Type_toint(datatype: Raw) -> c_int {
    datatype as c_int
}

#[unsafe(no_mangle)]
pub extern "C" fn MPI_Type_fromint(datatype: c_int) -> Raw {
    datatype as u32 as Raw
}

/// The keys of datatype attributes.
static KEYS: attr::Keys = attr::Keys::new();
const MPI_KEYVAL_INVALID: c_int = 0;

/// # Safety
/// Callbacks of the C types `MPI_Type_copy_attr_function` and
/// `MPI_Type_delete_attr_function` (or the predefined ones); `type_keyval` writable.
#[unsafe(export_name = "PMPI_Type_create_keyval")]
pub unsafe extern "C" fn MPI_Type_create_keyval(
    copy: usize,
    delete: usize,
    type_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    let k = KEYS.create(copy, delete, extra_state);
    // SAFETY: the C caller passes a writable int.
    tri!(unsafe { out("MPI_Type_create_keyval", "type_keyval", type_keyval, k) });
    MPI_SUCCESS
}

/// # Safety
/// `type_keyval` readable and writable.
#[unsafe(export_name = "PMPI_Type_free_keyval")]
pub unsafe extern "C" fn MPI_Type_free_keyval(type_keyval: *mut c_int) -> c_int {
    let call = "MPI_Type_free_keyval";
    if type_keyval.is_null() {
        return err(call, MPI_ERR_ARG, "type_keyval is NULL");
    }
    // SAFETY: non-null.
    let k = unsafe { *type_keyval };
    if KEYS.free(k).is_err() {
        return err(
            call,
            MPI_ERR_KEYVAL,
            format_args!("{k} is not a datatype key"),
        );
    }
    // SAFETY: non-null.
    unsafe { *type_keyval = MPI_KEYVAL_INVALID };
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Type_set_attr")]
pub extern "C" fn MPI_Type_set_attr(
    datatype: Raw,
    type_keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    let call = "MPI_Type_set_attr";
    let t = tri!(get(call, datatype));
    let Some(kv) = KEYS.get(type_keyval) else {
        return err(
            call,
            MPI_ERR_KEYVAL,
            format_args!("{type_keyval} is not a datatype key"),
        );
    };
    match t
        .attrs
        .set(datatype, type_keyval, kv, attribute_val as usize)
    {
        Ok(()) => MPI_SUCCESS,
        Err(c) => err(call, c, "the old value's delete callback failed"),
    }
}

/// # Safety
/// `attribute_val` points to a `void *`; `flag` writable.
#[unsafe(export_name = "PMPI_Type_get_attr")]
pub unsafe extern "C" fn MPI_Type_get_attr(
    datatype: Raw,
    type_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    let call = "MPI_Type_get_attr";
    let t = tri!(get(call, datatype));
    if KEYS.get(type_keyval).is_none() {
        return err(
            call,
            MPI_ERR_KEYVAL,
            format_args!("{type_keyval} is not a datatype key"),
        );
    }
    if attribute_val.is_null() || flag.is_null() {
        return err(call, MPI_ERR_ARG, "attribute_val or flag is NULL");
    }
    let v = t.attrs.get(type_keyval);
    // SAFETY: checked non-null; the C caller's outputs.
    unsafe {
        *flag = v.is_some() as c_int;
        if let Some(v) = v {
            (attribute_val as *mut usize).write(v);
        }
    }
    MPI_SUCCESS
}

#[unsafe(export_name = "PMPI_Type_delete_attr")]
pub extern "C" fn MPI_Type_delete_attr(datatype: Raw, type_keyval: c_int) -> c_int {
    let call = "MPI_Type_delete_attr";
    let t = tri!(get(call, datatype));
    if KEYS.get(type_keyval).is_none() {
        return err(
            call,
            MPI_ERR_KEYVAL,
            format_args!("{type_keyval} is not a datatype key"),
        );
    }
    match t.attrs.delete(datatype, type_keyval) {
        Ok(true) => MPI_SUCCESS,
        Ok(false) => err(
            call,
            MPI_ERR_KEYVAL,
            format_args!("no attribute with key {type_keyval}"),
        ),
        Err(c) => err(call, c, "the delete callback failed"),
    }
}
