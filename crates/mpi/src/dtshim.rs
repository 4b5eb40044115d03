//! A stand-in for the `datatype` module (the types part of the MPI layer) with the
//! predefined contiguous datatypes only, so that point-to-point and communicator calls
//! build and are tested before derived datatypes are merged. To be replaced by
//! `crate::datatype` (same interface: `lookup`, `Datatype::{size, extent, true_lb,
//! contiguous, pack, unpack}`): `lib.rs` names the module in use as `dt`.

use std::os::raw::c_int;
use std::sync::Arc;

use crate::error::MPI_ERR_TYPE;
use crate::handle::Raw;

pub struct Datatype {
    size: usize,
}

/// Predefined datatypes whose elements are their bytes, no gaps: (handle, bytes).
const PREDEFINED: &[(Raw, usize)] = &[
    (0x201, 8),
    (0x202, 8),
    (0x203, 8),
    (0x207, 1),
    (0x208, 2),
    (0x209, 4),
    (0x20a, std::mem::size_of::<std::os::raw::c_long>()),
    (0x20b, 8),
    (0x20c, 2),
    (0x20d, 4),
    (0x20e, std::mem::size_of::<std::os::raw::c_ulong>()),
    (0x20f, 8),
    (0x210, 4),
    (0x212, 8),
    (0x213, 8),
    (0x214, 8),
    (0x216, 16),
    (0x217, 16),
    (0x218, 4),
    (0x219, 4),
    (0x21a, 4),
    (0x21b, 8),
    (0x21c, 8),
    (0x21d, 16),
    (0x21e, 1),
    (0x220, 16),
    (0x224, 32),
    (0x225, 32),
    (0x228, 8),
    (0x22b, 8),
    (0x230, 8),
    (0x231, 16),
    (0x232, 8),
    (0x238, 1),
    (0x239, 1),
    (0x23c, 4),
    (0x240, 1),
    (0x241, 1),
    (0x243, 1),
    (0x244, 1),
    (0x245, 1),
    (0x247, 1),
    (0x248, 2),
    (0x249, 2),
    (0x250, 4),
    (0x251, 4),
    (0x258, 8),
    (0x259, 8),
];

pub fn lookup(h: Raw) -> Result<Arc<Datatype>, c_int> {
    PREDEFINED
        .iter()
        .find(|p| p.0 == h)
        .map(|&(_, size)| Arc::new(Datatype { size }))
        .ok_or(MPI_ERR_TYPE)
}

impl Datatype {
    pub fn size(&self) -> usize {
        self.size
    }
    pub fn true_lb(&self) -> isize {
        0
    }
    pub fn contiguous(&self) -> bool {
        true
    }

    /// # Safety
    /// `buf` valid for reads of `count * size` bytes.
    pub unsafe fn pack(&self, buf: *const u8, count: usize, out: &mut Vec<u8>) {
        // SAFETY: forwarded contract.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(buf, count * self.size) });
    }

    /// # Safety
    /// `buf` valid for writes of `count * size` bytes.
    pub unsafe fn unpack(&self, data: &[u8], buf: *mut u8, count: usize) {
        let n = data.len().min(count * self.size);
        // SAFETY: forwarded contract; n bytes fit both.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, n) };
    }
}
