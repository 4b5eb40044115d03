//! Reduction operations: MPI's predefined operations, user operations (`MPI_Op_create`),
//! `MPI_Op_free`, `MPI_Op_commutative` and `MPI_Reduce_local`.
//!
//! Every reduction computes `inout[i] = in[i] op inout[i]`, where `in` holds the values of
//! lower ranks (the MPI standard's order for operations that are not commutative). The
//! predefined operations follow the standard's table of which operation is defined on
//! which type (an operation applied to a type outside its row is `MPI_ERR_OP`): MIN and MAX
//! on integers and floating point; SUM and PROD also on complex; the logical operations on
//! integers and `C_BOOL`; the bitwise ones on integers and `BYTE`; MINLOC and MAXLOC on the
//! pair types; REPLACE and NO_OP (for `MPI_Accumulate`) on anything.
//!
//! SUM, PROD, MIN and MAX on the fixed-size integers and `float`/`double` are
//! `bulkwire_collectives::op::builtin`, the kernels the collectives layer already has; the
//! operations and types it lacks (bitwise and logical, complex, `long double`, the pairs)
//! are here. `long double` is x87 extended precision on x86-64 and is computed with x87
//! instructions, so results round as a C compiler's would.

use std::os::raw::{c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};

use bulkwire_collectives::op::{Builtin, Datatype as CDt, builtin};

use crate::datatype::{self, Basic, Datatype};
use crate::error::{MPI_ERR_ARG, MPI_ERR_OP, MPI_SUCCESS};
use crate::handle::{Kind as HKind, Raw, Table};

/// `MPI_OP_NULL`.
pub const MPI_OP_NULL: Raw = 0x20;

/// The predefined operations, with their ABI handle values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Predef {
    Sum = 0x21,
    Min = 0x22,
    Max = 0x23,
    Prod = 0x24,
    Band = 0x28,
    Bor = 0x29,
    Bxor = 0x2a,
    Land = 0x30,
    Lor = 0x31,
    Lxor = 0x32,
    MinLoc = 0x38,
    MaxLoc = 0x39,
    Replace = 0x3c,
    NoOp = 0x3d,
}

impl Predef {
    pub const ALL: [Predef; 14] = [
        Predef::Sum,
        Predef::Min,
        Predef::Max,
        Predef::Prod,
        Predef::Band,
        Predef::Bor,
        Predef::Bxor,
        Predef::Land,
        Predef::Lor,
        Predef::Lxor,
        Predef::MinLoc,
        Predef::MaxLoc,
        Predef::Replace,
        Predef::NoOp,
    ];

    pub fn from_handle(h: Raw) -> Option<Predef> {
        Predef::ALL.into_iter().find(|p| *p as usize == h)
    }

    pub fn handle(self) -> Raw {
        self as usize
    }
}

/// A user function as C declares it: `void f(void *in, void *inout, int *len, MPI_Datatype *dt)`.
pub type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Raw);

#[derive(Clone, Copy, Debug)]
enum Kind {
    Predef(Predef),
    User { f: UserFn, commute: bool },
}

/// A reduction operation.
#[derive(Debug)]
pub struct Op {
    kind: Kind,
}

impl Op {
    pub fn predefined(&self) -> Option<Predef> {
        match self.kind {
            Kind::Predef(p) => Some(p),
            Kind::User { .. } => None,
        }
    }

    pub fn commutative(&self) -> bool {
        match self.kind {
            Kind::Predef(_) => true,
            Kind::User { commute, .. } => commute,
        }
    }

    /// `inout[i] = in[i] op inout[i]` for `count` elements of `dt` as they lie in memory
    /// (the contract's entry point, for `MPI_Accumulate`: predefined operations only, as
    /// the standard allows there; a user operation needs the type's handle, see
    /// [`Op::apply_handle`]).
    ///
    /// # Safety
    /// Both buffers must hold `count` elements of `dt`; they may not overlap.
    pub unsafe fn apply(
        &self,
        input: *const u8,
        inout: *mut u8,
        count: usize,
        dt: &Datatype,
    ) -> Result<(), c_int> {
        match self.kind {
            // SAFETY: forwarded contract.
            Kind::Predef(p) => unsafe { apply_predef_mem(p, input, inout, count, dt) },
            Kind::User { .. } => Err(MPI_ERR_OP),
        }
    }

    /// [`Op::apply`] for any operation: `dth` is `dt`'s handle, which a user function is
    /// given.
    ///
    /// # Safety
    /// As [`Op::apply`].
    pub unsafe fn apply_handle(
        &self,
        input: *const u8,
        inout: *mut u8,
        count: usize,
        dt: &Datatype,
        dth: Raw,
    ) -> Result<(), c_int> {
        match self.kind {
            // SAFETY: forwarded contract.
            Kind::Predef(p) => unsafe { apply_predef_mem(p, input, inout, count, dt) },
            // SAFETY: forwarded contract.
            Kind::User { f, .. } => unsafe {
                call_user(f, input, inout, count, dth);
                Ok(())
            },
        }
    }

    /// `inout = in op inout` on packed data: `count` elements of `dt` as `Datatype::pack`
    /// writes them (what the collectives move).
    ///
    /// # Safety
    /// Both pointers must be valid for `count * dt.size()` bytes and not overlap.
    pub unsafe fn apply_packed(
        &self,
        input: *const u8,
        inout: *mut u8,
        count: usize,
        dt: &Datatype,
        dth: Raw,
    ) -> Result<(), c_int> {
        match self.kind {
            Kind::Predef(p) => {
                let Some((b, n)) = dt.basic() else {
                    return match p {
                        Predef::NoOp => Ok(()),
                        Predef::Replace => {
                            // SAFETY: both hold count*size bytes, disjoint.
                            unsafe {
                                std::ptr::copy_nonoverlapping(input, inout, count * dt.size())
                            };
                            Ok(())
                        }
                        _ => Err(MPI_ERR_OP),
                    };
                };
                // SAFETY: packed data of `dt` is `count * n` packed values of `b`.
                unsafe { kernel(p, b, input, inout, count * n, true) }
            }
            Kind::User { f, .. } => {
                let tlb = dt.true_lb();
                if dt.contiguous() {
                    // The packed bytes are the elements' bytes: the user function sees
                    // them where the type says its data begins.
                    // SAFETY: forwarded contract; the function reads and writes the data
                    // bytes only, which are the packed range.
                    unsafe {
                        call_user(
                            f,
                            input.wrapping_offset(-tlb),
                            inout.wrapping_offset(-tlb),
                            count,
                            dth,
                        )
                    };
                    return Ok(());
                }
                // A layout with gaps: unpack both into memory of the type's layout, apply,
                // pack the result back.
                let span = layout_span(dt, count);
                let mut a = vec![0u8; span];
                let mut b = vec![0u8; span];
                let len = count * dt.size();
                // SAFETY: a and b hold `count` elements laid out from offset -true_lb;
                // the packed inputs hold `len` bytes.
                unsafe {
                    let pa = a.as_mut_ptr().wrapping_offset(-tlb);
                    let pb = b.as_mut_ptr().wrapping_offset(-tlb);
                    dt.unpack(std::slice::from_raw_parts(input, len), pa, count);
                    dt.unpack(std::slice::from_raw_parts(inout, len), pb, count);
                    call_user(f, pa, pb, count, dth);
                    let mut out = Vec::with_capacity(len);
                    dt.pack(pb, count, &mut out);
                    std::ptr::copy_nonoverlapping(out.as_ptr(), inout, len);
                }
                Ok(())
            }
        }
    }

    /// The same reduction as a `bulkwire_collectives` operation on its element type, when
    /// it has one: predefined operations on the fixed-size integers and `float`/`double`.
    pub fn for_collectives(&self, b: Basic) -> Option<(bulkwire_collectives::Op, CDt)> {
        let p = self.predefined()?;
        let (cls, _) = class(b);
        let dt = cdt(b)?;
        if !allowed(p, cls) {
            return None;
        }
        use bulkwire_collectives::Op as COp;
        Some((
            match p {
                Predef::Sum => COp::Sum,
                Predef::Min => COp::Min,
                Predef::Max => COp::Max,
                Predef::Prod => COp::Prod,
                Predef::Band
                | Predef::Bor
                | Predef::Bxor
                | Predef::Land
                | Predef::Lor
                | Predef::Lxor => COp::User(bulkwire_collectives::UserOp::from_raw(
                    move |lo, hi, _| {
                        let n = lo.len() / b.size();
                        // SAFETY: lo and hi hold n whole values of b (the collectives
                        // cut buffers at element boundaries of dt, whose size is b's).
                        let r = unsafe { kernel(p, b, lo.as_ptr(), hi.as_mut_ptr(), n, true) };
                        debug_assert!(r.is_ok());
                    },
                    true,
                )),
                _ => return None,
            },
            dt,
        ))
    }
}

/// `inout = input op inout` over packed values of `dt`'s predefined value type, whole
/// values only (what `MPI_Accumulate` applies at the target: predefined operations).
pub fn apply_packed_values(
    op: Raw,
    dt: &Datatype,
    input: &[u8],
    inout: &mut [u8],
) -> Result<(), c_int> {
    let p = Predef::from_handle(op).ok_or(MPI_ERR_OP)?;
    let n = input.len().min(inout.len());
    match p {
        Predef::NoOp => Ok(()),
        Predef::Replace => {
            inout[..n].copy_from_slice(&input[..n]);
            Ok(())
        }
        _ => {
            let (b, _) = dt.basic().ok_or(MPI_ERR_OP)?;
            // SAFETY: both slices hold at least n / size whole packed values of b.
            unsafe { kernel(p, b, input.as_ptr(), inout.as_mut_ptr(), n / b.size(), true) }
        }
    }
}

/// Bytes spanned by `count` elements of `dt` from its true lower bound.
fn layout_span(dt: &Datatype, count: usize) -> usize {
    if count == 0 {
        return 0;
    }
    (dt.true_extent() + (count as isize - 1) * dt.extent()).max(0) as usize
}

/// Calls a user function, in pieces if `count` exceeds `int`.
///
/// # Safety
/// The buffers must hold `count` elements of the type `dth`.
unsafe fn call_user(f: UserFn, input: *const u8, inout: *mut u8, count: usize, dth: Raw) {
    let mut done = 0usize;
    let ext = match datatype::lookup(dth) {
        Ok(d) => d.extent(),
        Err(_) => 0,
    };
    while done < count {
        let n = (count - done).min(c_int::MAX as usize);
        let mut len = n as c_int;
        let mut h = dth;
        let off = done as isize * ext;
        // SAFETY: the caller's contract; the pieces lie `extent` apart.
        unsafe {
            f(
                input.wrapping_offset(off) as *mut c_void,
                inout.wrapping_offset(off) as *mut c_void,
                &mut len,
                &mut h,
            )
        };
        done += n;
    }
}

/// Predefined operation on memory laid out as `dt` says.
///
/// # Safety
/// As [`Op::apply`].
unsafe fn apply_predef_mem(
    p: Predef,
    input: *const u8,
    inout: *mut u8,
    count: usize,
    dt: &Datatype,
) -> Result<(), c_int> {
    if p == Predef::NoOp || count == 0 {
        return Ok(());
    }
    let tlb = dt.true_lb();
    let len = count * dt.size();
    if dt.contiguous() {
        let (i, io) = (input.wrapping_offset(tlb), inout.wrapping_offset(tlb));
        if p == Predef::Replace {
            // SAFETY: contiguous: the data is the len bytes from true_lb.
            unsafe { std::ptr::copy_nonoverlapping(i, io, len) };
            return Ok(());
        }
        let (b, n) = dt.basic().ok_or(MPI_ERR_OP)?;
        // SAFETY: contiguous: count*n packed values of b.
        return unsafe { kernel(p, b, i, io, count * n, true) };
    }
    // Gaps: work on packed copies.
    if p != Predef::Replace {
        let (b, _) = dt.basic().ok_or(MPI_ERR_OP)?;
        check(p, b)?;
    }
    let mut a = Vec::with_capacity(len);
    let mut b = Vec::with_capacity(len);
    // SAFETY: the caller's buffers hold `count` elements of dt.
    unsafe {
        dt.pack(input, count, &mut a);
        dt.pack(inout, count, &mut b);
    }
    if p != Predef::Replace {
        let (bt, n) = dt.basic().ok_or(MPI_ERR_OP)?;
        // SAFETY: a and b hold count*n packed values of bt.
        unsafe { kernel(p, bt, a.as_ptr(), b.as_mut_ptr(), count * n, true)? };
    } else {
        b = a;
    }
    // SAFETY: inout holds `count` elements of dt.
    unsafe { dt.unpack(&b, inout, count) };
    Ok(())
}

/// The classes of the standard's table of operations and types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Int,
    Float,
    Complex,
    Logical,
    Byte,
    Pair,
    Other,
}

/// A value's class and, for numbers, how to compute with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Num {
    I(u8),
    U(u8),
    F32,
    F64,
    F80,
    None,
}

fn class(b: Basic) -> (Class, Num) {
    use Basic::*;
    match b {
        Char | SignedChar | Int8 => (Class::Int, Num::I(1)),
        UnsignedChar | UInt8 => (Class::Int, Num::U(1)),
        Short | Int16 => (Class::Int, Num::I(2)),
        UnsignedShort | UInt16 => (Class::Int, Num::U(2)),
        // wchar_t is a 32-bit signed integer on the systems bulkwire runs on.
        Int | Int32 | WChar => (Class::Int, Num::I(4)),
        Unsigned | UInt32 => (Class::Int, Num::U(4)),
        Long | LongLong | Int64 | Aint | Offset | Count => (Class::Int, Num::I(8)),
        UnsignedLong | UnsignedLongLong | UInt64 => (Class::Int, Num::U(8)),
        Float => (Class::Float, Num::F32),
        Double => (Class::Float, Num::F64),
        LongDouble => (Class::Float, Num::F80),
        CFloatComplex => (Class::Complex, Num::F32),
        CDoubleComplex => (Class::Complex, Num::F64),
        CLongDoubleComplex => (Class::Complex, Num::F80),
        CBool => (Class::Logical, Num::U(1)),
        Byte => (Class::Byte, Num::U(1)),
        FloatInt => (Class::Pair, Num::F32),
        DoubleInt => (Class::Pair, Num::F64),
        LongInt => (Class::Pair, Num::I(8)),
        TwoInt => (Class::Pair, Num::I(4)),
        ShortInt => (Class::Pair, Num::I(2)),
        LongDoubleInt => (Class::Pair, Num::F80),
        TwoFloat => (Class::Pair, Num::F32),
        TwoDouble => (Class::Pair, Num::F64),
        _ => (Class::Other, Num::None),
    }
}

fn allowed(p: Predef, c: Class) -> bool {
    use Class::*;
    match p {
        Predef::Min | Predef::Max => matches!(c, Int | Float),
        Predef::Sum | Predef::Prod => matches!(c, Int | Float | Complex),
        Predef::Land | Predef::Lor | Predef::Lxor => matches!(c, Int | Logical),
        Predef::Band | Predef::Bor | Predef::Bxor => matches!(c, Int | Byte),
        Predef::MinLoc | Predef::MaxLoc => c == Pair,
        Predef::Replace | Predef::NoOp => true,
    }
}

/// Whether predefined operation `p` is defined on `b` (`MPI_ERR_OP` if not).
pub fn check(p: Predef, b: Basic) -> Result<(), c_int> {
    if allowed(p, class(b).0) {
        Ok(())
    } else {
        Err(MPI_ERR_OP)
    }
}

/// The collectives layer's element type for a value of `b`, if it has one.
fn cdt(b: Basic) -> Option<CDt> {
    let (c, n) = class(b);
    if !matches!(c, Class::Int | Class::Float | Class::Logical | Class::Byte) {
        return None;
    }
    Some(match n {
        Num::I(1) => CDt::I8,
        Num::I(2) => CDt::I16,
        Num::I(4) => CDt::I32,
        Num::I(8) => CDt::I64,
        Num::U(1) => CDt::U8,
        Num::U(2) => CDt::U16,
        Num::U(4) => CDt::U32,
        Num::U(8) => CDt::U64,
        Num::F32 => CDt::F32,
        Num::F64 => CDt::F64,
        _ => return None,
    })
}

/// Reads the integer of `w` bytes at `p` as i128/u128-compatible truth value.
///
/// # Safety
/// `p` must be valid for `w` bytes.
unsafe fn nonzero(p: *const u8, w: usize) -> bool {
    // SAFETY: the caller's contract.
    unsafe { (0..w).any(|k| *p.add(k) != 0) }
}

/// `n` values of `b` at `input` and `inout` (packed if `packed`, else as C lays them
/// out; only the pair types differ): `inout = input op inout`.
///
/// # Safety
/// Both must be valid for `n` values; they may not overlap.
pub(crate) unsafe fn kernel(
    p: Predef,
    b: Basic,
    input: *const u8,
    inout: *mut u8,
    n: usize,
    packed: bool,
) -> Result<(), c_int> {
    let (cls, num) = class(b);
    if !allowed(p, cls) {
        return Err(MPI_ERR_OP);
    }
    if n == 0 || p == Predef::NoOp {
        return Ok(());
    }
    let w = b.size();
    if cls == Class::Pair {
        // SAFETY: forwarded contract.
        return unsafe { pair_kernel(p, b, num, input, inout, n, packed) };
    }
    let len = n * w;
    // SAFETY: both hold `len` bytes (non-pair values have no padding).
    let (lo, hi) = unsafe {
        (
            std::slice::from_raw_parts(input, len),
            std::slice::from_raw_parts_mut(inout, len),
        )
    };
    match p {
        Predef::Replace => hi.copy_from_slice(lo),
        Predef::Band => hi.iter_mut().zip(lo).for_each(|(h, l)| *h &= l),
        Predef::Bor => hi.iter_mut().zip(lo).for_each(|(h, l)| *h |= l),
        Predef::Bxor => hi.iter_mut().zip(lo).for_each(|(h, l)| *h ^= l),
        Predef::Land | Predef::Lor | Predef::Lxor => {
            // The result is 0 or 1 in the operands' type, as C's logical operators give.
            for (h, l) in hi.chunks_exact_mut(w).zip(lo.chunks_exact(w)) {
                // SAFETY: each chunk has w bytes.
                let (a, c) = unsafe { (nonzero(l.as_ptr(), w), nonzero(h.as_ptr(), w)) };
                let r = match p {
                    Predef::Land => a && c,
                    Predef::Lor => a || c,
                    _ => a != c,
                };
                h.fill(0);
                if r {
                    // The value 1 in native byte order.
                    let k = if cfg!(target_endian = "little") {
                        0
                    } else {
                        w - 1
                    };
                    h[k] = 1;
                }
            }
        }
        Predef::Sum | Predef::Prod | Predef::Min | Predef::Max => {
            let k = match p {
                Predef::Sum => Builtin::Sum,
                Predef::Prod => Builtin::Prod,
                Predef::Min => Builtin::Min,
                _ => Builtin::Max,
            };
            match (cls, num) {
                (Class::Complex, Num::F32) => complex::<f32>(k, lo, hi),
                (Class::Complex, Num::F64) => complex::<f64>(k, lo, hi),
                (Class::Complex, Num::F80) => {
                    for (h, l) in hi.chunks_exact_mut(32).zip(lo.chunks_exact(32)) {
                        f80_complex(k, l, h);
                    }
                }
                (_, Num::F80) => {
                    for (h, l) in hi.chunks_exact_mut(16).zip(lo.chunks_exact(16)) {
                        f80_scalar(k, l, h);
                    }
                }
                _ => builtin(k, cdt(b).ok_or(MPI_ERR_OP)?, lo, hi),
            }
        }
        Predef::MinLoc | Predef::MaxLoc | Predef::NoOp => {}
    }
    Ok(())
}

/// Complex float/double: pairs (re, im).
trait Real:
    Copy + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> + std::ops::Sub<Output = Self>
{
    const W: usize;
    fn get(b: &[u8]) -> Self;
    fn put(self, b: &mut [u8]);
}
impl Real for f32 {
    const W: usize = 4;
    fn get(b: &[u8]) -> f32 {
        f32::from_ne_bytes(b[..4].try_into().unwrap_or([0; 4]))
    }
    fn put(self, b: &mut [u8]) {
        b[..4].copy_from_slice(&self.to_ne_bytes())
    }
}
impl Real for f64 {
    const W: usize = 8;
    fn get(b: &[u8]) -> f64 {
        f64::from_ne_bytes(b[..8].try_into().unwrap_or([0; 8]))
    }
    fn put(self, b: &mut [u8]) {
        b[..8].copy_from_slice(&self.to_ne_bytes())
    }
}

fn complex<T: Real>(k: Builtin, lo: &[u8], hi: &mut [u8]) {
    let w = T::W;
    for (h, l) in hi.chunks_exact_mut(2 * w).zip(lo.chunks_exact(2 * w)) {
        let (a, b) = (T::get(l), T::get(&l[w..]));
        let (c, d) = (T::get(h), T::get(&h[w..]));
        let (re, im) = match k {
            Builtin::Prod => (a * c - b * d, a * d + b * c),
            _ => (a + c, b + d),
        };
        re.put(h);
        im.put(&mut h[w..]);
    }
}

/// x87 extended precision, as C's `long double` on x86-64: 10 bytes of value in a 16-byte
/// slot.
#[cfg(target_arch = "x86_64")]
mod x87 {
    use std::arch::asm;

    /// `out = a + b` (op 0), `a * b` (1), `a - b` (2), in 80-bit precision.
    pub fn bin(op: u8, a: &[u8], b: &[u8], out: &mut [u8]) {
        assert!(a.len() >= 10 && b.len() >= 10 && out.len() >= 10);
        let (pa, pb, po) = (a.as_ptr(), b.as_ptr(), out.as_mut_ptr());
        // SAFETY: the three slices are at least 10 bytes (checked); the x87 stack is left
        // as found (two loads, one pop by the arithmetic, one by the store).
        unsafe {
            match op {
                0 => asm!("fld tbyte ptr [{a}]", "fld tbyte ptr [{b}]", "faddp st(1), st",
                          "fstp tbyte ptr [{o}]", a = in(reg) pa, b = in(reg) pb, o = in(reg) po,
                          out("st(0)") _, out("st(1)") _, options(nostack)),
                1 => asm!("fld tbyte ptr [{a}]", "fld tbyte ptr [{b}]", "fmulp st(1), st",
                          "fstp tbyte ptr [{o}]", a = in(reg) pa, b = in(reg) pb, o = in(reg) po,
                          out("st(0)") _, out("st(1)") _, options(nostack)),
                _ => asm!("fld tbyte ptr [{a}]", "fld tbyte ptr [{b}]", "fsubp st(1), st",
                          "fstp tbyte ptr [{o}]", a = in(reg) pa, b = in(reg) pb, o = in(reg) po,
                          out("st(0)") _, out("st(1)") _, options(nostack)),
            }
        }
    }

    /// Compares: -1 if a < b, 1 if a > b, 0 if equal or unordered.
    pub fn cmp(a: &[u8], b: &[u8]) -> i8 {
        assert!(a.len() >= 10 && b.len() >= 10);
        let (lt, gt, un): (u8, u8, u8);
        // SAFETY: both slices hold 10 bytes (checked); the two loads are popped by
        // fcomip and fstp.
        unsafe {
            asm!("fld tbyte ptr [{b}]", "fld tbyte ptr [{a}]", "fcomip st, st(1)",
                 "fstp st(0)", "setb {lt}", "seta {gt}", "setp {un}",
                 a = in(reg) a.as_ptr(), b = in(reg) b.as_ptr(), lt = out(reg_byte) lt,
                 gt = out(reg_byte) gt, un = out(reg_byte) un, out("st(0)") _, out("st(1)") _, options(nostack));
        }
        // Unordered (a NaN) sets CF, ZF and PF: count it as equal.
        if un == 1 {
            0
        } else if lt == 1 {
            -1
        } else if gt == 1 {
            1
        } else {
            0
        }
    }
}

/// Without x87, `long double` is taken as `double` (its value in the slot's first bytes).
#[cfg(not(target_arch = "x86_64"))]
mod x87 {
    fn get(b: &[u8]) -> f64 {
        f64::from_ne_bytes(b[..8].try_into().unwrap_or([0; 8]))
    }
    pub fn bin(op: u8, a: &[u8], b: &[u8], out: &mut [u8]) {
        let r = match op {
            0 => get(a) + get(b),
            1 => get(a) * get(b),
            _ => get(a) - get(b),
        };
        out[..8].copy_from_slice(&r.to_ne_bytes());
    }
    pub fn cmp(a: &[u8], b: &[u8]) -> i8 {
        match get(a).partial_cmp(&get(b)) {
            Some(std::cmp::Ordering::Less) => -1,
            Some(std::cmp::Ordering::Greater) => 1,
            _ => 0,
        }
    }
}

fn f80_scalar(k: Builtin, lo: &[u8], hi: &mut [u8]) {
    match k {
        Builtin::Sum | Builtin::Prod => {
            let mut r = [0u8; 16];
            x87::bin(if k == Builtin::Sum { 0 } else { 1 }, lo, hi, &mut r);
            hi[..10].copy_from_slice(&r[..10]);
        }
        Builtin::Min => {
            if x87::cmp(lo, hi) < 0 {
                hi.copy_from_slice(lo);
            }
        }
        Builtin::Max => {
            if x87::cmp(lo, hi) > 0 {
                hi.copy_from_slice(lo);
            }
        }
    }
}

fn f80_complex(k: Builtin, lo: &[u8], hi: &mut [u8]) {
    let (a, b) = lo.split_at(16);
    let (c, d) = (hi[..16].to_vec(), hi[16..].to_vec());
    let mut re = [0u8; 16];
    let mut im = [0u8; 16];
    if k == Builtin::Prod {
        let (mut t1, mut t2) = ([0u8; 16], [0u8; 16]);
        x87::bin(1, a, &c, &mut t1);
        x87::bin(1, b, &d, &mut t2);
        x87::bin(2, &t1, &t2, &mut re);
        x87::bin(1, a, &d, &mut t1);
        x87::bin(1, b, &c, &mut t2);
        x87::bin(0, &t1, &t2, &mut im);
    } else {
        x87::bin(0, a, &c, &mut re);
        x87::bin(0, b, &d, &mut im);
    }
    hi[..10].copy_from_slice(&re[..10]);
    hi[16..26].copy_from_slice(&im[..10]);
}

/// Compares two values of a pair's first member.
fn cmp_value(num: Num, a: &[u8], b: &[u8]) -> i8 {
    fn ord<T: PartialOrd>(x: T, y: T) -> i8 {
        if x < y {
            -1
        } else if x > y {
            1
        } else {
            0
        }
    }
    let arr = |s: &[u8], n: usize| {
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(&s[..n]);
        v
    };
    match num {
        Num::F32 => ord(
            f32::from_ne_bytes(arr(a, 4)[..4].try_into().unwrap_or([0; 4])),
            f32::from_ne_bytes(arr(b, 4)[..4].try_into().unwrap_or([0; 4])),
        ),
        Num::F64 => ord(f64::from_ne_bytes(arr(a, 8)), f64::from_ne_bytes(arr(b, 8))),
        Num::I(8) => ord(i64::from_ne_bytes(arr(a, 8)), i64::from_ne_bytes(arr(b, 8))),
        Num::I(4) => ord(
            i32::from_ne_bytes(a[..4].try_into().unwrap_or([0; 4])),
            i32::from_ne_bytes(b[..4].try_into().unwrap_or([0; 4])),
        ),
        Num::I(2) => ord(
            i16::from_ne_bytes(a[..2].try_into().unwrap_or([0; 2])),
            i16::from_ne_bytes(b[..2].try_into().unwrap_or([0; 2])),
        ),
        Num::F80 => x87::cmp(a, b),
        _ => 0,
    }
}

/// MINLOC and MAXLOC: the better value wins with its index; on a tie the smaller index
/// (the standard's rule, which makes the operation commutative).
///
/// # Safety
/// As [`kernel`].
unsafe fn pair_kernel(
    p: Predef,
    b: Basic,
    num: Num,
    input: *const u8,
    inout: *mut u8,
    n: usize,
    packed: bool,
) -> Result<(), c_int> {
    // Fortran's pairs (2REAL, 2DOUBLE_PRECISION) carry the index in the value's type.
    let (vsize, iw) = match b {
        Basic::TwoFloat => (4, 4),
        Basic::TwoDouble => (8, 8),
        _ => (b.size() - 4, 4),
    };
    let (ioff, stride) = if packed {
        (vsize, vsize + iw)
    } else {
        match b {
            Basic::ShortInt => (4, 8),
            Basic::LongDoubleInt => (16, 32),
            _ => (vsize, vsize * 2),
        }
    };
    let len = (n - 1) * stride + ioff + iw;
    // SAFETY: n values of `stride` bytes, the last one up to its index's end.
    let (lo, hi) = unsafe {
        (
            std::slice::from_raw_parts(input, len),
            std::slice::from_raw_parts_mut(inout, len),
        )
    };
    if p == Predef::Replace {
        hi.copy_from_slice(lo);
        return Ok(());
    }
    let inum = match b {
        Basic::TwoFloat => Num::F32,
        Basic::TwoDouble => Num::F64,
        _ => Num::I(4),
    };
    let iend = ioff + iw;
    for k in 0..n {
        let at = k * stride;
        let l = &lo[at..at + iend];
        let h = &mut hi[at..at + iend];
        let c = cmp_value(num, &l[..vsize], &h[..vsize]);
        let better = if p == Predef::MinLoc { c < 0 } else { c > 0 };
        if better {
            h[..vsize].copy_from_slice(&l[..vsize]);
            h[ioff..iend].copy_from_slice(&l[ioff..iend]);
        } else if c == 0 && cmp_value(inum, &l[ioff..iend], &h[ioff..iend]) < 0 {
            h[ioff..iend].copy_from_slice(&l[ioff..iend]);
        }
    }
    Ok(())
}

// ---- handles ------------------------------------------------------------------------------

static USER: Mutex<Table<Arc<Op>>> = Mutex::new(Table::new(HKind::Op));

fn predefined_ops() -> &'static [Arc<Op>] {
    static P: OnceLock<Vec<Arc<Op>>> = OnceLock::new();
    P.get_or_init(|| {
        Predef::ALL
            .iter()
            .map(|&p| {
                Arc::new(Op {
                    kind: Kind::Predef(p),
                })
            })
            .collect()
    })
}

/// The operation of handle `h`; `MPI_ERR_OP` for `MPI_OP_NULL` and unknown handles.
pub fn lookup(h: Raw) -> Result<Arc<Op>, c_int> {
    if let Some(p) = Predef::from_handle(h) {
        let i = Predef::ALL.iter().position(|&q| q == p).unwrap_or(0);
        return Ok(predefined_ops()[i].clone());
    }
    USER.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(h)
        .cloned()
        .ok_or(MPI_ERR_OP)
}

/// Stores a user operation; its handle.
pub fn create(f: UserFn, commute: bool) -> Raw {
    USER.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(Arc::new(Op {
            kind: Kind::User { f, commute },
        }))
}

/// Drops user operation `h` (operations in flight keep their reference).
pub fn free(h: Raw) -> Result<(), c_int> {
    if Predef::from_handle(h).is_some() {
        return Err(MPI_ERR_OP);
    }
    USER.lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(h)
        .map(|_| ())
        .ok_or(MPI_ERR_OP)
}

/// `MPI_Op_create`: a user operation.
///
/// # Safety
/// `op` must be valid for a write; `f` must be a function of the declared C type.
#[unsafe(export_name = "PMPI_Op_create")]
pub unsafe extern "C" fn MPI_Op_create(f: Option<UserFn>, commute: c_int, op: *mut Raw) -> c_int {
    let Some(f) = f else {
        return crate::coll::fail_world(MPI_ERR_ARG, "MPI_Op_create: the function is NULL");
    };
    if op.is_null() {
        return crate::coll::fail_world(MPI_ERR_ARG, "MPI_Op_create: op is NULL");
    }
    // SAFETY: checked non-null; the caller's contract.
    unsafe { *op = create(f, commute != 0) };
    MPI_SUCCESS
}

/// `MPI_Op_free`: frees a user operation (collectives in flight keep their own
/// reference); sets the handle to `MPI_OP_NULL`.
///
/// # Safety
/// `op` must be valid for reads and writes.
#[unsafe(export_name = "PMPI_Op_free")]
pub unsafe extern "C" fn MPI_Op_free(op: *mut Raw) -> c_int {
    if op.is_null() {
        return crate::coll::fail_world(MPI_ERR_ARG, "MPI_Op_free: op is NULL");
    }
    // SAFETY: checked non-null; the caller's contract.
    let h = unsafe { *op };
    if Predef::from_handle(h).is_some() {
        return crate::coll::fail_world(
            MPI_ERR_OP,
            format_args!("MPI_Op_free: operation {h:#x} is predefined"),
        );
    }
    if free(h).is_err() {
        return crate::coll::fail_world(
            MPI_ERR_OP,
            format_args!("MPI_Op_free: {h:#x} is not an operation"),
        );
    }
    // SAFETY: as above.
    unsafe { *op = MPI_OP_NULL };
    MPI_SUCCESS
}

/// `MPI_Op_commutative`.
///
/// # Safety
/// `commute` must be valid for a write.
#[unsafe(export_name = "PMPI_Op_commutative")]
pub unsafe extern "C" fn MPI_Op_commutative(op: Raw, commute: *mut c_int) -> c_int {
    let o = match lookup(op) {
        Ok(o) => o,
        Err(e) => {
            return crate::coll::fail_world(
                e,
                format_args!("MPI_Op_commutative: {op:#x} is not an operation"),
            );
        }
    };
    if commute.is_null() {
        return crate::coll::fail_world(MPI_ERR_ARG, "MPI_Op_commutative: commute is NULL");
    }
    // SAFETY: checked non-null; the caller's contract.
    unsafe { *commute = o.commutative() as c_int };
    MPI_SUCCESS
}

/// `MPI_Reduce_local`: `inoutbuf = inbuf op inoutbuf`.
///
/// # Safety
/// Both buffers must hold `count` elements of `datatype`.
#[unsafe(export_name = "PMPI_Reduce_local")]
pub unsafe extern "C" fn MPI_Reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    datatype: Raw,
    op: Raw,
) -> c_int {
    const WHAT: &str = "MPI_Reduce_local";
    let o = match lookup(op) {
        Ok(o) => o,
        Err(e) => {
            return crate::coll::fail_world(e, format_args!("{WHAT}: {op:#x} is not an operation"));
        }
    };
    let dt = match datatype::lookup(datatype) {
        Ok(d) => d,
        Err(e) => {
            return crate::coll::fail_world(
                e,
                format_args!("{WHAT}: {datatype:#x} is not a datatype"),
            );
        }
    };
    if count < 0 {
        return crate::coll::fail_world(
            crate::error::MPI_ERR_COUNT,
            format_args!("{WHAT}: count {count} is negative"),
        );
    }
    if count == 0 {
        return MPI_SUCCESS;
    }
    // SAFETY: the caller's contract.
    match unsafe { o.apply_handle(inbuf.cast(), inoutbuf.cast(), count as usize, &dt, datatype) } {
        Ok(()) => MPI_SUCCESS,
        Err(e) => crate::coll::fail_world(
            e,
            format_args!("{WHAT}: operation {op:#x} is not defined on datatype {datatype:#x}"),
        ),
    }
}

#[cfg(test)]
mod tests;
