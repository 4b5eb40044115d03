//! Element types and reduction operations.
//!
//! Reductions work on byte buffers holding whole elements of a [`Datatype`] (native byte
//! order, any alignment: received data lands wherever the transport put it), so the same
//! kernels serve the typed Rust API and the C API. The one primitive every algorithm uses
//! is [`Op::apply`]: `hi = lo op hi`, elementwise, where `lo` holds the combined values of
//! lower ranks than `hi`. Algorithms keep that orientation, so an operation that is not
//! commutative is applied in rank order: the result is `x0 op x1 op ... op x(p-1)`.

use std::fmt;
use std::sync::Arc;

use crate::Error;

/// Element types of reductions (and of the typed movement collectives).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Datatype {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
}

impl Datatype {
    /// Every type, for tests and tables.
    pub const ALL: [Datatype; 10] = [
        Datatype::I8,
        Datatype::I16,
        Datatype::I32,
        Datatype::I64,
        Datatype::U8,
        Datatype::U16,
        Datatype::U32,
        Datatype::U64,
        Datatype::F32,
        Datatype::F64,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Datatype::I8 | Datatype::U8 => 1,
            Datatype::I16 | Datatype::U16 => 2,
            Datatype::I32 | Datatype::U32 | Datatype::F32 => 4,
            Datatype::I64 | Datatype::U64 | Datatype::F64 => 8,
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A plain element type: every bit pattern is a value and there is no padding, so a slice
/// of it may be viewed as bytes and rebuilt from any bytes. Implemented for `i8`..`i64`,
/// `u8`..`u64`, `f32` and `f64` (sealed: the byte views rely on those properties).
pub trait Elem: Copy + Send + Sync + 'static + sealed::Sealed {
    const TYPE: Datatype;
}

macro_rules! elem {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Elem for $t {
            const TYPE: Datatype = Datatype::$d;
        }
    )*};
}
elem!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32,
      u64 => U64, f32 => F32, f64 => F64);

/// The bytes of a slice of elements.
pub fn as_bytes<T: Elem>(s: &[T]) -> &[u8] {
    // SAFETY: T is one of the sealed plain types (no padding, no invalid bytes); the byte
    // view covers exactly the slice's memory and borrows it for the same lifetime.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

/// The bytes of a mutable slice of elements.
pub fn as_bytes_mut<T: Elem>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; in addition every byte pattern written through the view is
    // a valid T, so the slice stays valid whatever is written.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

/// The built-in operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    Sum,
    Min,
    Max,
    Prod,
}

type RawFn = dyn Fn(&[u8], &mut [u8], Datatype) + Send + Sync;

/// A user-defined reduction (MPI's `MPI_Op_create`). Assumed associative; commutative only
/// if it says so (otherwise the algorithms apply it in rank order).
#[derive(Clone)]
pub struct UserOp {
    f: Arc<RawFn>,
    commutative: bool,
    /// A typed operation accepts only its own element type.
    only: Option<Datatype>,
}

impl fmt::Debug for UserOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserOp")
            .field("commutative", &self.commutative)
            .field("only", &self.only)
            .finish()
    }
}

impl UserOp {
    /// An elementwise operation on `T`: `f(a, b)` combines `a`, from lower ranks, with `b`.
    pub fn new<T: Elem>(
        f: impl Fn(T, T) -> T + Send + Sync + 'static,
        commutative: bool,
    ) -> UserOp {
        let n = std::mem::size_of::<T>();
        let raw = move |input: &[u8], inout: &mut [u8], _: Datatype| {
            for (a, b) in input.chunks_exact(n).zip(inout.chunks_exact_mut(n)) {
                // SAFETY: each chunk has exactly size_of::<T>() bytes; T is a plain type, so
                // any bytes are a value; unaligned accesses because buffers are bytes.
                unsafe {
                    let x = std::ptr::read_unaligned(a.as_ptr().cast::<T>());
                    let y = std::ptr::read_unaligned(b.as_ptr().cast::<T>());
                    std::ptr::write_unaligned(b.as_mut_ptr().cast::<T>(), f(x, y));
                }
            }
        };
        UserOp {
            f: Arc::new(raw),
            commutative,
            only: Some(T::TYPE),
        }
    }

    /// An operation on raw element arrays, like an MPI user function: `f(input, inout,
    /// datatype)` must set every element of `inout` to `input[i] op inout[i]`, where
    /// `input` holds the values of lower ranks. Both slices hold the same whole number of
    /// elements of `datatype`.
    pub fn from_raw(
        f: impl Fn(&[u8], &mut [u8], Datatype) + Send + Sync + 'static,
        commutative: bool,
    ) -> UserOp {
        UserOp {
            f: Arc::new(f),
            commutative,
            only: None,
        }
    }
}

/// A reduction operation.
#[derive(Clone, Debug)]
pub enum Op {
    Sum,
    Min,
    Max,
    Prod,
    User(UserOp),
}

impl From<Builtin> for Op {
    fn from(b: Builtin) -> Op {
        match b {
            Builtin::Sum => Op::Sum,
            Builtin::Min => Op::Min,
            Builtin::Max => Op::Max,
            Builtin::Prod => Op::Prod,
        }
    }
}

impl Op {
    /// An elementwise user operation (see [`UserOp::new`]).
    pub fn user<T: Elem>(f: impl Fn(T, T) -> T + Send + Sync + 'static, commutative: bool) -> Op {
        Op::User(UserOp::new(f, commutative))
    }

    /// Whether operands may be combined in any order (built-ins: yes).
    pub fn is_commutative(&self) -> bool {
        match self {
            Op::User(u) => u.commutative,
            _ => true,
        }
    }

    /// Whether this operation accepts elements of `dt`.
    pub(crate) fn check(&self, dt: Datatype) -> Result<(), Error> {
        match self {
            Op::User(UserOp { only: Some(t), .. }) if *t != dt => Err(Error::Arg(format!(
                "a user operation on {t:?} applied to {dt:?} elements"
            ))),
            _ => Ok(()),
        }
    }

    /// `hi = lo op hi`, elementwise; `lo` holds lower ranks' values. Both hold the same
    /// whole number of `dt` elements (the callers cut them so).
    pub(crate) fn apply(&self, dt: Datatype, lo: &[u8], hi: &mut [u8]) {
        debug_assert_eq!(lo.len(), hi.len());
        debug_assert_eq!(lo.len() % dt.size(), 0);
        match self {
            Op::Sum => builtin(Builtin::Sum, dt, lo, hi),
            Op::Min => builtin(Builtin::Min, dt, lo, hi),
            Op::Max => builtin(Builtin::Max, dt, lo, hi),
            Op::Prod => builtin(Builtin::Prod, dt, lo, hi),
            Op::User(u) => (u.f)(lo, hi, dt),
        }
    }

    /// Combines `other` into `acc`: `acc = other op acc` if `other_is_lower`, else
    /// `acc = acc op other`. `other` is scratch and may be overwritten.
    pub(crate) fn combine(
        &self,
        dt: Datatype,
        acc: &mut [u8],
        other: &mut [u8],
        other_is_lower: bool,
    ) {
        if other_is_lower || self.is_commutative() {
            self.apply(dt, other, acc);
        } else {
            self.apply(dt, acc, other);
            acc.copy_from_slice(other);
        }
    }
}

/// The element loop of one built-in: `hi[i] = f(lo[i], hi[i])` over native-endian
/// elements (whole arrays, so the compiler vectorises it).
macro_rules! each {
    ($t:ty, $lo:expr, $hi:expr, |$a:ident, $b:ident| $e:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        let (lo, _) = $lo.as_chunks::<N>();
        let (hi, _) = $hi.as_chunks_mut::<N>();
        for (x, y) in lo.iter().zip(hi.iter_mut()) {
            let $a = <$t>::from_ne_bytes(*x);
            let $b = <$t>::from_ne_bytes(*y);
            *y = ($e).to_ne_bytes();
        }
    }};
}

macro_rules! int_kernel {
    ($t:ty, $k:expr, $lo:expr, $hi:expr) => {
        match $k {
            // Integer overflow wraps, as C's unsigned arithmetic and every MPI does.
            Builtin::Sum => each!($t, $lo, $hi, |a, b| a.wrapping_add(b)),
            Builtin::Prod => each!($t, $lo, $hi, |a, b| a.wrapping_mul(b)),
            Builtin::Min => each!($t, $lo, $hi, |a, b| a.min(b)),
            Builtin::Max => each!($t, $lo, $hi, |a, b| a.max(b)),
        }
    };
}

macro_rules! float_kernel {
    ($t:ty, $k:expr, $lo:expr, $hi:expr) => {
        match $k {
            Builtin::Sum => each!($t, $lo, $hi, |a, b| a + b),
            Builtin::Prod => each!($t, $lo, $hi, |a, b| a * b),
            Builtin::Min => each!($t, $lo, $hi, |a, b| a.min(b)),
            Builtin::Max => each!($t, $lo, $hi, |a, b| a.max(b)),
        }
    };
}

/// `hi = lo op hi` for a built-in operation.
pub fn builtin(k: Builtin, dt: Datatype, lo: &[u8], hi: &mut [u8]) {
    match dt {
        Datatype::I8 => int_kernel!(i8, k, lo, hi),
        Datatype::I16 => int_kernel!(i16, k, lo, hi),
        Datatype::I32 => int_kernel!(i32, k, lo, hi),
        Datatype::I64 => int_kernel!(i64, k, lo, hi),
        Datatype::U8 => int_kernel!(u8, k, lo, hi),
        Datatype::U16 => int_kernel!(u16, k, lo, hi),
        Datatype::U32 => int_kernel!(u32, k, lo, hi),
        Datatype::U64 => int_kernel!(u64, k, lo, hi),
        Datatype::F32 => float_kernel!(f32, k, lo, hi),
        Datatype::F64 => float_kernel!(f64, k, lo, hi),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply<T: Elem>(op: &Op, lo: &[T], hi: &mut [T]) {
        op.apply(T::TYPE, as_bytes(lo), as_bytes_mut(hi));
    }

    #[test]
    fn builtins_on_every_type() {
        let mut h = [5i8, -3, 127];
        apply(&Op::Sum, &[1i8, 2, 1], &mut h);
        assert_eq!(h, [6, -1, -128]);
        let mut h = [5u16, 3, 9];
        apply(&Op::Min, &[1u16, 7, 9], &mut h);
        assert_eq!(h, [1, 3, 9]);
        let mut h = [5i64, -3];
        apply(&Op::Max, &[-1i64, 2], &mut h);
        assert_eq!(h, [5, 2]);
        let mut h = [3u32, 1 << 31];
        apply(&Op::Prod, &[2u32, 2], &mut h);
        assert_eq!(h, [6, 0]);
        let mut h = [1.5f64, -2.0];
        apply(&Op::Prod, &[2.0f64, 4.0], &mut h);
        assert_eq!(h, [3.0, -8.0]);
        let mut h = [1.5f32, f32::NAN];
        apply(&Op::Max, &[2.0f32, 4.0], &mut h);
        assert_eq!(h, [2.0, 4.0]);
        for dt in Datatype::ALL {
            let lo = vec![1u8; dt.size() * 3];
            let mut hi = vec![0u8; dt.size() * 3];
            Op::Max.apply(dt, &lo, &mut hi);
            Op::Sum.apply(dt, &lo, &mut hi);
        }
    }

    #[test]
    fn unaligned_buffers() {
        let lo: Vec<u8> = (0..33).collect();
        let mut hi: Vec<u8> = vec![1; 33];
        Op::Sum.apply(Datatype::U64, &lo[1..], &mut hi[1..]);
        let want: u64 = u64::from_ne_bytes(lo[1..9].try_into().unwrap())
            .wrapping_add(u64::from_ne_bytes([1; 8]));
        assert_eq!(u64::from_ne_bytes(hi[1..9].try_into().unwrap()), want);
    }

    #[test]
    fn user_ops_keep_the_order_they_are_given() {
        // a op b = 2a + b: neither commutative nor (as the tests use it) anything else.
        let op = Op::user(|a: i32, b: i32| 2 * a + b, false);
        assert!(!op.is_commutative());
        let mut h = [10, 20];
        apply(&op, &[1, 2], &mut h);
        assert_eq!(h, [12, 24]);
        // combine: other lower -> other op acc; other higher -> acc op other.
        let mut acc = [1i32];
        let mut other = [10i32];
        op.combine(
            Datatype::I32,
            as_bytes_mut(&mut acc),
            as_bytes_mut(&mut other),
            false,
        );
        assert_eq!(acc, [12]);
        let mut acc = [1i32];
        let mut other = [10i32];
        op.combine(
            Datatype::I32,
            as_bytes_mut(&mut acc),
            as_bytes_mut(&mut other),
            true,
        );
        assert_eq!(acc, [21]);
        assert!(op.check(Datatype::I32).is_ok());
        assert!(op.check(Datatype::F64).is_err());
        let raw = Op::User(UserOp::from_raw(|i, io, _| io.copy_from_slice(i), false));
        assert!(raw.check(Datatype::F64).is_ok());
    }
}
