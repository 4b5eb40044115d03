//! Stand-ins for the parts of the shared MPI interface that other modules own (datatypes:
//! `crate::datatype`; communicators, requests and error handlers: `crate::comm`,
//! `crate::request`, `crate::runtime`), with the contract's signatures, so that the
//! operations and collectives build and test before those modules are merged.
//!
//! TO BE REPLACED on merge: `use crate::datatype::{Basic, Datatype, lookup}` etc. instead.
//! The datatype stand-in knows the predefined types only (every one contiguous except the
//! padded pair types).

use std::os::raw::c_int;
use std::sync::Arc;

use crate::error::MPI_ERR_TYPE;
use crate::handle::Raw;

/// Predefined element types (the contract's `crate::datatype::Basic`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Basic {
    Char,
    SignedChar,
    UnsignedChar,
    Byte,
    Short,
    UnsignedShort,
    Int,
    Unsigned,
    Long,
    UnsignedLong,
    LongLong,
    UnsignedLongLong,
    Float,
    Double,
    LongDouble,
    WChar,
    CBool,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Aint,
    Offset,
    Count,
    CFloatComplex,
    CDoubleComplex,
    CLongDoubleComplex,
    FloatInt,
    DoubleInt,
    LongInt,
    TwoInt,
    ShortInt,
    LongDoubleInt,
    Packed,
}

impl Basic {
    /// Bytes of data in one value (pair types without their padding).
    pub fn size(self) -> usize {
        use Basic::*;
        match self {
            Char | SignedChar | UnsignedChar | Byte | CBool | Int8 | UInt8 | Packed => 1,
            Short | UnsignedShort | Int16 | UInt16 => 2,
            Int | Unsigned | Float | WChar | Int32 | UInt32 => 4,
            Long | UnsignedLong | LongLong | UnsignedLongLong | Double | Int64 | UInt64 | Aint
            | Offset | Count | CFloatComplex => 8,
            LongDouble | CDoubleComplex => 16,
            CLongDoubleComplex => 32,
            FloatInt | TwoInt => 8,
            DoubleInt | LongInt => 12,
            ShortInt => 6,
            LongDoubleInt => 20,
        }
    }
}

/// The predefined types by their ABI handle values (`mpi_abi.h`).
pub fn basic_of(h: Raw) -> Option<Basic> {
    use Basic::*;
    Some(match h {
        0x201 => Aint,
        0x202 => Count,
        0x203 => Offset,
        0x207 => Packed,
        0x208 => Short,
        0x209 => Int,
        0x20a => Long,
        0x20b => LongLong,
        0x20c => UnsignedShort,
        0x20d => Unsigned,
        0x20e => UnsignedLong,
        0x20f => UnsignedLongLong,
        0x210 => Float,
        0x212 => CFloatComplex,
        0x214 => Double,
        0x216 => CDoubleComplex,
        0x220 => LongDouble,
        0x224 => CLongDoubleComplex,
        0x228 => FloatInt,
        0x229 => DoubleInt,
        0x22a => LongInt,
        0x22b => TwoInt,
        0x22c => ShortInt,
        0x22d => LongDoubleInt,
        0x238 => CBool,
        0x23c => WChar,
        0x240 => Int8,
        0x241 => UInt8,
        0x243 => Char,
        0x244 => SignedChar,
        0x245 => UnsignedChar,
        0x247 => Byte,
        0x248 => Int16,
        0x249 => UInt16,
        0x250 => Int32,
        0x251 => UInt32,
        0x258 => Int64,
        0x259 => UInt64,
        _ => return None,
    })
}

/// A predefined type (the contract's `crate::datatype::Datatype`).
#[derive(Debug)]
pub struct Datatype {
    basic: Basic,
}

/// Where the integer of a pair type lies in memory, and the pair's extent.
fn pair_layout(b: Basic) -> Option<(usize, usize)> {
    Some(match b {
        Basic::FloatInt | Basic::TwoInt | Basic::ShortInt => (4, 8),
        Basic::DoubleInt | Basic::LongInt => (8, 16),
        Basic::LongDoubleInt => (16, 32),
        _ => return None,
    })
}

impl Datatype {
    pub fn size(&self) -> usize {
        self.basic.size()
    }
    pub fn extent(&self) -> isize {
        pair_layout(self.basic).map_or(self.basic.size(), |(_, e)| e) as isize
    }
    pub fn lb(&self) -> isize {
        0
    }
    pub fn true_lb(&self) -> isize {
        0
    }
    pub fn true_extent(&self) -> isize {
        pair_layout(self.basic).map_or(self.basic.size(), |(i, _)| i + 4) as isize
    }
    pub fn committed(&self) -> bool {
        true
    }
    pub fn contiguous(&self) -> bool {
        pair_layout(self.basic).is_none()
    }
    pub fn basic(&self) -> Option<(Basic, usize)> {
        Some((self.basic, 1))
    }

    /// Appends `count` elements at `buf`, packed.
    ///
    /// # Safety
    /// `buf` must hold `count` elements of this type.
    pub unsafe fn pack(&self, buf: *const u8, count: usize, out: &mut Vec<u8>) {
        let e = self.extent() as usize;
        match pair_layout(self.basic) {
            None => {
                // SAFETY: the caller's buffer holds count*size contiguous bytes.
                out.extend_from_slice(unsafe { std::slice::from_raw_parts(buf, count * e) })
            }
            Some((i, _)) => {
                let v = self.basic.size() - 4;
                for k in 0..count {
                    // SAFETY: element k spans [k*e, k*e+i+4) of the caller's buffer.
                    unsafe {
                        let el = buf.add(k * e);
                        out.extend_from_slice(std::slice::from_raw_parts(el, v));
                        out.extend_from_slice(std::slice::from_raw_parts(el.add(i), 4));
                    }
                }
            }
        }
    }

    /// Writes `data` (packed elements) into `count` elements at `buf`.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `count` elements of this type.
    pub unsafe fn unpack(&self, data: &[u8], buf: *mut u8, count: usize) {
        let e = self.extent() as usize;
        let n = data.len().min(count * self.size());
        match pair_layout(self.basic) {
            None => {
                // SAFETY: n <= count*size bytes fit the caller's buffer.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, n) }
            }
            Some((i, _)) => {
                let s = self.basic.size();
                let v = s - 4;
                for (k, el) in data[..n].chunks(s).enumerate() {
                    // SAFETY: element k of the caller's buffer spans [k*e, k*e+i+4).
                    unsafe {
                        let at = buf.add(k * e);
                        std::ptr::copy_nonoverlapping(el.as_ptr(), at, el.len().min(v));
                        if el.len() > v {
                            std::ptr::copy_nonoverlapping(
                                el.as_ptr().add(v),
                                at.add(i),
                                el.len() - v,
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The type of handle `h` (predefined types only; `MPI_ERR_TYPE` otherwise).
pub fn lookup(h: Raw) -> Result<Arc<Datatype>, c_int> {
    basic_of(h)
        .map(|basic| Arc::new(Datatype { basic }))
        .ok_or(MPI_ERR_TYPE)
}
