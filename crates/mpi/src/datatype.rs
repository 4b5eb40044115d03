//! MPI datatypes: the predefined C (and Fortran) types of the MPI 5.0 ABI and the derived
//! types built from them.
//!
//! One element of a type is kept as a normalised list of byte runs in type-map order:
//! runs that touch are joined, and runs of one length at one stride are kept as one
//! strided run, so a vector's blocks are one run however many there are, and a contiguous
//! type of a contiguous type is one run. Packing walks the runs; a type whose element is
//! one run as long as its extent is `contiguous()`, and `count` elements of it are one run
//! that can be sent in place. Beside the runs a type records the predefined type its values
//! all have (`basic()`, for reductions) and its basic values in order, run-length encoded
//! (for `MPI_Get_elements` and the `external32` representation of `MPI_Pack_external`:
//! big-endian, with the standard's sizes).
//!
//! Handles: predefined types at their ABI values (`MPI_INT` = 0x209), derived ones from a
//! `handle::Table`. The table holds an `Arc`, so freeing a type a pending operation still
//! uses is safe.
//!
//! Limits: a type's description grows with the runs that do not repeat at one stride (an
//! indexed type of n scattered blocks is n runs, a vector of vectors one strided run per
//! outer block); one of more than 2^26 runs is refused with `MPI_ERR_NO_MEM`. The long
//! double types have no `external32` form (`MPI_ERR_UNSUPPORTED_DATAREP`).

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::*;
use crate::handle::{self, Kind, Raw, Table};

pub(crate) mod attr;
mod capi;
#[cfg(test)]
mod tests;

pub use capi::*;

/// The predefined type a value has: what a reduction computes on.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// Fortran's `MPI_2REAL`: two floats (for MINLOC/MAXLOC).
    TwoFloat,
    /// Fortran's `MPI_2DOUBLE_PRECISION`: two doubles.
    TwoDouble,
}

impl Basic {
    /// Bytes of data in one value (a pair type's padding not counted: `MPI_DOUBLE_INT` is 12).
    pub fn size(self) -> usize {
        use Basic::*;
        match self {
            Char | SignedChar | UnsignedChar | Byte | CBool | Int8 | UInt8 | Packed => 1,
            Short | UnsignedShort | Int16 | UInt16 => 2,
            Int | Unsigned | Float | WChar | Int32 | UInt32 => 4,
            Long | UnsignedLong | LongLong | UnsignedLongLong | Double | Int64 | UInt64 | Aint
            | Offset | Count => 8,
            LongDouble => 16,
            CFloatComplex => 8,
            CDoubleComplex => 16,
            CLongDoubleComplex => 32,
            FloatInt | TwoInt | TwoFloat => 8,
            DoubleInt | LongInt => 12,
            ShortInt => 6,
            LongDoubleInt => 20,
            TwoDouble => 16,
        }
    }

    /// The C alignment of the value (x86-64 and AArch64 System V ABIs).
    pub fn align(self) -> usize {
        use Basic::*;
        match self {
            CFloatComplex | FloatInt | TwoInt | TwoFloat => 4,
            CDoubleComplex | DoubleInt | LongInt | TwoDouble => 8,
            ShortInt => 4,
            CLongDoubleComplex | LongDoubleInt | LongDouble => 16,
            b => b.size(),
        }
    }

    /// The parts of one value with their offsets, and its extent: a pair type is a C
    /// struct `{ value; int }` with the struct's padding, so `MPI_SHORT_INT` has a hole and
    /// `MPI_DOUBLE_INT` a 16-byte extent.
    fn parts(self) -> (&'static [(isize, Basic)], usize) {
        use Basic::*;
        match self {
            DoubleInt => (&[(0, Double), (8, Int)], 16),
            LongInt => (&[(0, Long), (8, Int)], 16),
            ShortInt => (&[(0, Short), (4, Int)], 8),
            LongDoubleInt => (&[(0, LongDouble), (16, Int)], 32),
            FloatInt => (&[(0, Float), (4, Int)], 8),
            TwoInt => (&[(0, Int), (4, Int)], 8),
            TwoFloat => (&[(0, Float), (4, Float)], 8),
            TwoDouble => (&[(0, Double), (8, Double)], 16),
            _ => (&[], self.size()),
        }
    }

    /// Bytes of the value in the `external32` representation (big-endian; `long` and
    /// `unsigned long` are 4 bytes there, `wchar_t` 2); `None` for the long double types,
    /// whose external form (IEEE quadruple precision) is not provided.
    pub fn external_size(self) -> Option<usize> {
        use Basic::*;
        match self {
            Long | UnsignedLong => Some(4),
            WChar => Some(2),
            LongDouble | CLongDoubleComplex | LongDoubleInt => None,
            LongInt => Some(8),
            b => Some(b.size()),
        }
    }

    /// Appends the `external32` form of the value `v` (its native bytes) to `out`.
    fn native_to_external(self, v: &[u8], out: &mut Vec<u8>) {
        use Basic::*;
        let be = |b: &[u8], out: &mut Vec<u8>| {
            if cfg!(target_endian = "little") {
                out.extend(b.iter().rev());
            } else {
                out.extend_from_slice(b);
            }
        };
        match self {
            Long | UnsignedLong | WChar => {
                let n = self.external_size().unwrap_or(0);
                let mut w = [0u8; 8];
                w[..v.len()].copy_from_slice(v);
                // The low bytes, most significant first.
                let x = if v.len() == 8 {
                    u64::from_ne_bytes(w)
                } else {
                    u32::from_ne_bytes(w[..4].try_into().unwrap()) as u64
                };
                out.extend_from_slice(&x.to_be_bytes()[8 - n..]);
            }
            CFloatComplex | CDoubleComplex => {
                let h = v.len() / 2;
                be(&v[..h], out);
                be(&v[h..], out);
            }
            _ => be(v, out),
        }
    }

    /// Appends the native bytes of the `external32` value `x` to `out`.
    fn external_to_native(self, x: &[u8], out: &mut Vec<u8>) {
        use Basic::*;
        let ne = |b: &[u8], out: &mut Vec<u8>| {
            if cfg!(target_endian = "little") {
                out.extend(b.iter().rev());
            } else {
                out.extend_from_slice(b);
            }
        };
        match self {
            Long => out.extend_from_slice(
                &(i32::from_be_bytes(x.try_into().unwrap()) as i64).to_ne_bytes(),
            ),
            UnsignedLong => out.extend_from_slice(
                &(u32::from_be_bytes(x.try_into().unwrap()) as u64).to_ne_bytes(),
            ),
            WChar => out.extend_from_slice(
                &(u16::from_be_bytes(x.try_into().unwrap()) as i32).to_ne_bytes(),
            ),
            CFloatComplex | CDoubleComplex => {
                let h = x.len() / 2;
                ne(&x[..h], out);
                ne(&x[h..], out);
            }
            _ => ne(x, out),
        }
    }
}

/// `count` runs of `len` bytes of an element, the first at `off` from the element's start,
/// each `stride` bytes after the one before (a vector's blocks are one `Run`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub off: isize,
    pub len: usize,
    pub count: usize,
    pub stride: isize,
}

impl Run {
    fn one(off: isize, len: usize) -> Run {
        Run {
            off,
            len,
            count: 1,
            stride: 0,
        }
    }

    /// The single runs, in order.
    pub(crate) fn each(&self) -> impl Iterator<Item = (isize, usize)> + '_ {
        (0..self.count as isize).map(move |j| (self.off + j * self.stride, self.len))
    }
}

/// Where one element's bytes lie, and its bounds.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub runs: Vec<Run>,
    pub size: usize,
    pub lb: isize,
    pub ub: isize,
    pub true_lb: isize,
    pub true_ub: isize,
    /// The largest alignment of a value inside: a struct's extent is rounded up to it.
    pub align: usize,
    pub basic: Option<(Basic, usize)>,
    /// Sizes of the basic values in type-map order, as (size, how many in a row).
    pub prims: Vec<(Basic, usize)>,
}

/// `count` copies of `old`, the first at `disp` bytes from the new element's start, each
/// following one `old.extent` further.
#[derive(Clone, Copy)]
pub(crate) struct Block<'a> {
    pub disp: isize,
    pub count: usize,
    pub old: &'a Layout,
}

/// Appends `r` (shifted by `shift`): joined to the last run where they touch, counted
/// into it where it continues its stride.
fn push_run(runs: &mut Vec<Run>, shift: isize, r: &Run) {
    if r.len == 0 || r.count == 0 {
        return;
    }
    let off = shift + r.off;
    if let Some(last) = runs.last_mut() {
        if r.count == 1 && last.count == 1 && last.off + last.len as isize == off {
            last.len += r.len;
            return;
        }
        if last.len == r.len {
            if last.count == 1 && (r.count == 1 || r.stride == off - last.off) {
                last.stride = off - last.off;
                last.count += r.count;
                return;
            }
            if last.count > 1
                && off == last.off + last.count as isize * last.stride
                && (r.count == 1 || r.stride == last.stride)
            {
                last.count += r.count;
                return;
            }
        }
    }
    runs.push(Run { off, ..*r });
}

fn push_prims(prims: &mut Vec<(Basic, usize)>, b: Basic, n: usize) {
    if n == 0 {
        return;
    }
    match prims.last_mut() {
        Some(last) if last.0 == b => last.1 += n,
        _ => prims.push((b, n)),
    }
}

/// Runs, as a bound against types whose description does not fit in memory (a contiguous
/// type of a billion elements of a strided type): building one fails with `MPI_ERR_NO_MEM`.
const MAX_RUNS: usize = 1 << 26;

impl Layout {
    pub(crate) fn basic(b: Basic) -> Layout {
        let (parts, extent) = b.parts();
        let mut prims = Vec::new();
        let runs = if parts.is_empty() {
            push_prims(&mut prims, b, 1);
            vec![Run::one(0, b.size())]
        } else {
            let mut runs = Vec::new();
            for &(off, part) in parts {
                push_run(&mut runs, 0, &Run::one(off, part.size()));
                push_prims(&mut prims, part, 1);
            }
            runs
        };
        let true_ub = parts
            .last()
            .map_or(b.size() as isize, |&(off, part)| off + part.size() as isize);
        Layout {
            runs,
            size: b.size(),
            lb: 0,
            ub: extent as isize,
            true_lb: 0,
            true_ub,
            align: b.align(),
            basic: Some((b, 1)),
            prims,
        }
    }

    pub fn extent(&self) -> isize {
        self.ub - self.lb
    }

    /// One element is one run exactly as long as its extent (or holds no data).
    pub fn dense(&self) -> bool {
        self.runs.is_empty()
            || (self.runs.len() == 1
                && self.runs[0].count == 1
                && self.extent() == self.size as isize)
    }

    /// The type made of `blocks`; `pad`: round the extent up to the alignment of the values
    /// inside (`MPI_Type_create_struct`).
    pub(crate) fn build<'a>(
        blocks: impl IntoIterator<Item = Block<'a>>,
        pad: bool,
    ) -> Result<Layout, c_int> {
        let ovf = MPI_ERR_ARG;
        let mut runs: Vec<Run> = Vec::new();
        let mut prims = Vec::new();
        let mut size = 0usize;
        let mut bounds: Option<(isize, isize)> = None;
        let mut true_bounds: Option<(isize, isize)> = None;
        let mut align = 1;
        let mut basic: Option<Option<(Basic, usize)>> = None;
        // The value type of the blocks' old types when they all have the same.
        let mut olds_basic: Option<Option<Option<(Basic, usize)>>> = None;
        for b in blocks {
            olds_basic = match olds_basic {
                None => Some(Some(b.old.basic)),
                Some(Some(x)) if x == b.old.basic => Some(Some(x)),
                _ => Some(None),
            };
            // A struct's empty blocks add nothing, not even their alignment (the
            // single-type constructors take the old type's, see `inherit`).
            if b.count == 0 {
                continue;
            }
            align = align.max(b.old.align);
            let old = b.old;
            let ext = old.extent();
            let span = (b.count as isize - 1).checked_mul(ext).ok_or(ovf)?;
            let lo = b.disp.checked_add(span.min(0)).ok_or(ovf)?;
            let hi = b.disp.checked_add(span.max(0)).ok_or(ovf)?;
            let bl = (
                lo.checked_add(old.lb).ok_or(ovf)?,
                hi.checked_add(old.ub).ok_or(ovf)?,
            );
            bounds = Some(match bounds {
                None => bl,
                Some(c) => (c.0.min(bl.0), c.1.max(bl.1)),
            });
            // The true bounds are those of the data: a type without any adds none.
            if old.size > 0 {
                let tb = (
                    lo.checked_add(old.true_lb).ok_or(ovf)?,
                    hi.checked_add(old.true_ub).ok_or(ovf)?,
                );
                true_bounds = Some(match true_bounds {
                    None => tb,
                    Some(c) => (c.0.min(tb.0), c.1.max(tb.1)),
                });
            }
            size = old
                .size
                .checked_mul(b.count)
                .and_then(|n| n.checked_add(size))
                .ok_or(ovf)?;
            basic = Some(match (basic, old.basic) {
                (None, Some((t, n))) => Some((t, n * b.count)),
                (Some(Some((t, m))), Some((u, n))) if t == u => Some((t, m + n * b.count)),
                _ => None,
            });
            if old.dense() {
                // The copies lie end to end: one run for the whole block.
                if let Some(r) = old.runs.first() {
                    push_run(&mut runs, b.disp, &Run::one(r.off, old.size * b.count));
                }
                if old.prims.len() == 1 {
                    push_prims(&mut prims, old.prims[0].0, old.prims[0].1 * b.count);
                } else {
                    for _ in 0..b.count {
                        for &(s, n) in &old.prims {
                            push_prims(&mut prims, s, n);
                        }
                    }
                }
            } else {
                if runs
                    .len()
                    .saturating_add(old.runs.len().saturating_mul(b.count))
                    > MAX_RUNS
                {
                    return Err(MPI_ERR_NO_MEM);
                }
                for k in 0..b.count as isize {
                    let base = b.disp + k * ext;
                    for r in &old.runs {
                        push_run(&mut runs, base, r);
                    }
                    for &(s, n) in &old.prims {
                        push_prims(&mut prims, s, n);
                    }
                }
            }
            if prims.len() > MAX_RUNS {
                return Err(MPI_ERR_NO_MEM);
            }
        }
        let (lb, mut ub) = bounds.unwrap_or((0, 0));
        let (true_lb, true_ub) = true_bounds.unwrap_or((0, 0));
        // Always, even around a resized type: MPICH does so, and its tests expect it.
        if pad {
            let rem = (ub - lb).rem_euclid(align as isize);
            if rem != 0 {
                ub += align as isize - rem;
            }
        }
        let basic = match basic {
            Some(b) => b,
            // No data: keep the value type of a single old type (a count 0 contiguous
            // type of MPI_INT still reduces as MPI_INT).
            None => olds_basic.flatten().flatten().map(|(t, _)| (t, 0)),
        };
        Ok(Layout {
            runs,
            size,
            lb,
            ub,
            true_lb,
            true_ub,
            align,
            basic,
            prims,
        })
    }

    /// A type made of copies of `old` alone keeps its alignment even with no copies.
    pub(crate) fn inherit(mut self, old: &Layout) -> Layout {
        self.align = old.align;
        self
    }

    /// The same data with the bounds `lb` and `lb + extent` (`MPI_Type_create_resized`).
    pub(crate) fn resized(&self, lb: isize, extent: isize) -> Result<Layout, c_int> {
        let mut l = self.clone();
        l.lb = lb;
        l.ub = lb.checked_add(extent).ok_or(MPI_ERR_ARG)?;
        Ok(l)
    }
}

/// How a type was made, for `MPI_Type_get_envelope`/`MPI_Type_get_contents`.
#[derive(Clone, Debug)]
pub struct Envelope {
    pub combiner: c_int,
    pub ints: Vec<c_int>,
    pub addrs: Vec<isize>,
    pub types: Vec<Arc<Datatype>>,
}

pub const MPI_COMBINER_NAMED: c_int = 101;
pub const MPI_COMBINER_DUP: c_int = 102;
pub const MPI_COMBINER_CONTIGUOUS: c_int = 103;
pub const MPI_COMBINER_VECTOR: c_int = 104;
pub const MPI_COMBINER_HVECTOR: c_int = 105;
pub const MPI_COMBINER_INDEXED: c_int = 106;
pub const MPI_COMBINER_HINDEXED: c_int = 107;
pub const MPI_COMBINER_INDEXED_BLOCK: c_int = 108;
pub const MPI_COMBINER_HINDEXED_BLOCK: c_int = 109;
pub const MPI_COMBINER_STRUCT: c_int = 110;
pub const MPI_COMBINER_SUBARRAY: c_int = 111;
pub const MPI_COMBINER_DARRAY: c_int = 112;
pub const MPI_COMBINER_RESIZED: c_int = 116;

pub const MPI_ORDER_C: c_int = 0xC;
pub const MPI_ORDER_FORTRAN: c_int = 0xF;
pub const MPI_DISTRIBUTE_NONE: c_int = 16;
pub const MPI_DISTRIBUTE_BLOCK: c_int = 17;
pub const MPI_DISTRIBUTE_CYCLIC: c_int = 18;
pub const MPI_DISTRIBUTE_DFLT_DARG: c_int = 19;

pub const MPI_DATATYPE_NULL: Raw = 0x200;

/// An MPI datatype: immutable but for its name and committed flag; shared as `Arc`.
pub struct Datatype {
    layout: Layout,
    committed: AtomicBool,
    /// The ABI handle of a predefined type.
    named: Option<Raw>,
    name: Mutex<String>,
    envelope: Option<Envelope>,
    pub(crate) attrs: attr::Attrs,
}

impl std::fmt::Debug for Datatype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Datatype")
            .field("name", &*self.name.lock().unwrap())
            .field("layout", &self.layout)
            .finish()
    }
}

impl Datatype {
    pub(crate) fn derived(layout: Layout, envelope: Envelope) -> Datatype {
        Datatype {
            layout,
            committed: AtomicBool::new(false),
            named: None,
            name: Mutex::new(String::new()),
            envelope: Some(envelope),
            attrs: attr::Attrs::default(),
        }
    }

    fn predefined(h: Raw, name: &str, b: Basic) -> Datatype {
        Datatype {
            layout: Layout::basic(b),
            committed: AtomicBool::new(true),
            named: Some(h),
            name: Mutex::new(name.to_string()),
            envelope: None,
            attrs: attr::Attrs::default(),
        }
    }

    /// `MPI_Type_size`: bytes of data in one element.
    pub fn size(&self) -> usize {
        self.layout.size
    }
    pub fn extent(&self) -> isize {
        self.layout.extent()
    }
    pub fn lb(&self) -> isize {
        self.layout.lb
    }
    pub fn true_lb(&self) -> isize {
        self.layout.true_lb
    }
    pub fn true_extent(&self) -> isize {
        self.layout.true_ub - self.layout.true_lb
    }
    /// Predefined types are born committed.
    pub fn committed(&self) -> bool {
        self.committed.load(Ordering::Relaxed)
    }
    pub(crate) fn commit(&self) {
        self.committed.store(true, Ordering::Relaxed);
    }
    /// `count` elements at `buf` are the bytes `[buf+true_lb, buf+true_lb+count*size)`:
    /// they can be sent and received in place.
    pub fn contiguous(&self) -> bool {
        self.layout.dense()
    }
    /// Every element is `n` values of one predefined type.
    pub fn basic(&self) -> Option<(Basic, usize)> {
        self.layout.basic
    }
    /// The ABI handle of a predefined type.
    pub fn named(&self) -> Option<Raw> {
        self.named
    }
    pub fn name(&self) -> String {
        self.name.lock().unwrap().clone()
    }
    pub(crate) fn set_name(&self, s: &str) {
        *self.name.lock().unwrap() = s.to_string();
    }
    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }
    pub fn envelope(&self) -> Option<&Envelope> {
        self.envelope.as_ref()
    }

    /// Calls `f(offset, len)` for the byte runs of `count` elements in type-map order,
    /// offsets from the buffer's start; merged where one element's last run meets the next
    /// element's first.
    pub fn for_each_run(&self, count: usize, mut f: impl FnMut(isize, usize)) {
        let l = &self.layout;
        if l.runs.is_empty() || count == 0 {
            return;
        }
        if l.dense() {
            f(l.runs[0].off, l.size * count);
            return;
        }
        let ext = l.extent();
        let mut pending: Option<(isize, usize)> = None;
        for k in 0..count as isize {
            let base = k * ext;
            for (off, len) in l.runs.iter().flat_map(Run::each) {
                let off = base + off;
                match &mut pending {
                    Some((o, n)) if *o + *n as isize == off => *n += len,
                    _ => {
                        if let Some((o, n)) = pending.take() {
                            f(o, n);
                        }
                        pending = Some((off, len));
                    }
                }
            }
        }
        if let Some((o, n)) = pending {
            f(o, n);
        }
    }

    /// Appends the `count * size` bytes of `count` elements at `buf` to `out`.
    ///
    /// # Safety
    /// The bytes the type map of `count` elements names at `buf` must be readable.
    pub unsafe fn pack(&self, buf: *const u8, count: usize, out: &mut Vec<u8>) {
        out.reserve(self.size() * count);
        self.for_each_run(count, |off, len| {
            // SAFETY: the caller vouches for every run of the type map at buf.
            let src = unsafe { std::slice::from_raw_parts(buf.wrapping_offset(off), len) };
            out.extend_from_slice(src);
        });
    }

    /// Writes packed bytes of `count` elements, starting `skip` bytes into the packed form,
    /// into `out` (as many as fit); the bytes written.
    ///
    /// # Safety
    /// As for `pack`.
    pub unsafe fn pack_into(
        &self,
        buf: *const u8,
        count: usize,
        skip: usize,
        out: &mut [u8],
    ) -> usize {
        let mut pos = 0usize; // packed offset of the current run
        let mut done = 0usize;
        self.for_each_run(count, |off, len| {
            let start = pos.max(skip);
            let end = (pos + len).min(skip + out.len());
            if start < end {
                let n = end - start;
                let from = buf.wrapping_offset(off).wrapping_add(start - pos);
                // SAFETY: [from, from+n) lies inside a run of the type map the caller
                // vouches for; the destination range is inside `out`.
                unsafe {
                    std::ptr::copy_nonoverlapping(from, out.as_mut_ptr().add(start - skip), n)
                };
                done += n;
            }
            pos += len;
        });
        done
    }

    /// Writes packed `data` into `count` elements at `buf`; `data` may stop early (a
    /// truncated message): a partial element is written as far as the data goes.
    ///
    /// # Safety
    /// The bytes the type map of `count` elements names at `buf` must be writable and not
    /// overlap `data`.
    pub unsafe fn unpack(&self, data: &[u8], buf: *mut u8, count: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { self.unpack_from(data, 0, buf, count) };
    }

    /// As `unpack`, with `data` being the packed form from byte `skip` on.
    ///
    /// # Safety
    /// As for `unpack`.
    pub unsafe fn unpack_from(&self, data: &[u8], skip: usize, buf: *mut u8, count: usize) {
        let mut pos = 0usize;
        let limit = skip + data.len();
        self.for_each_run(count, |off, len| {
            let start = pos.max(skip);
            let end = (pos + len).min(limit);
            if start < end {
                let to = buf.wrapping_offset(off).wrapping_add(start - pos);
                // SAFETY: the destination is inside a run the caller vouches for; the source
                // range is inside `data`.
                unsafe {
                    std::ptr::copy_nonoverlapping(data.as_ptr().add(start - skip), to, end - start)
                };
            }
            pos += len;
        });
    }

    /// Bytes of `count` elements in the `external32` representation; `None` if a value
    /// has no external form here (long double).
    pub fn external_size(&self, count: usize) -> Option<usize> {
        let mut n = 0usize;
        for &(b, c) in &self.layout.prims {
            n = n.checked_add(b.external_size()?.checked_mul(c)?)?;
        }
        n.checked_mul(count)
    }

    /// Appends `count` elements at `buf` to `out` in the `external32` representation.
    ///
    /// # Safety
    /// As for `pack`.
    pub unsafe fn pack_external(
        &self,
        buf: *const u8,
        count: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), c_int> {
        let ext = self
            .external_size(count)
            .ok_or(MPI_ERR_UNSUPPORTED_DATAREP)?;
        let mut native = Vec::new();
        // SAFETY: forwarded.
        unsafe { self.pack(buf, count, &mut native) };
        out.reserve(ext);
        let mut at = 0;
        for _ in 0..count {
            for &(b, c) in &self.layout.prims {
                for _ in 0..c {
                    b.native_to_external(&native[at..at + b.size()], out);
                    at += b.size();
                }
            }
        }
        Ok(())
    }

    /// Writes `count` elements from their `external32` form `data` into `buf`; the bytes
    /// of `data` used.
    ///
    /// # Safety
    /// As for `unpack`.
    pub unsafe fn unpack_external(
        &self,
        data: &[u8],
        buf: *mut u8,
        count: usize,
    ) -> Result<usize, c_int> {
        let ext = self
            .external_size(count)
            .ok_or(MPI_ERR_UNSUPPORTED_DATAREP)?;
        if data.len() < ext {
            return Err(MPI_ERR_TRUNCATE);
        }
        let mut native = Vec::with_capacity(self.size() * count);
        let mut at = 0;
        for _ in 0..count {
            for &(b, c) in &self.layout.prims {
                let n = b.external_size().unwrap_or(0);
                for _ in 0..c {
                    b.external_to_native(&data[at..at + n], &mut native);
                    at += n;
                }
            }
        }
        // SAFETY: forwarded.
        unsafe { self.unpack(&native, buf, count) };
        Ok(ext)
    }

    /// `MPI_Get_elements`: the basic values in `bytes` bytes of packed data of this type;
    /// `None` when the bytes end inside a value.
    pub fn elements(&self, bytes: u64) -> Option<u64> {
        let size = self.size() as u64;
        if size == 0 {
            return (bytes == 0).then_some(0);
        }
        let per: u64 = self.layout.prims.iter().map(|&(_, n)| n as u64).sum();
        let mut n = bytes / size * per;
        let mut rem = (bytes % size) as usize;
        for &(b, c) in &self.layout.prims {
            let s = b.size();
            if rem == 0 {
                break;
            }
            if rem >= s * c {
                n += c as u64;
                rem -= s * c;
            } else {
                n += (rem / s) as u64;
                rem %= s;
                break;
            }
        }
        (rem == 0).then_some(n)
    }
}

/// The predefined types: ABI handle, name, value type. Fortran types are listed with the C
/// type gfortran lays them out as (`INTEGER` is a 4-byte int, `LOGICAL` a 4-byte int whose
/// nonzero value is true); the half-precision, 16-byte integer and quad types are left out.
const PREDEFINED: &[(Raw, &str, Basic)] = &[
    (0x201, "MPI_AINT", Basic::Aint),
    (0x202, "MPI_COUNT", Basic::Count),
    (0x203, "MPI_OFFSET", Basic::Offset),
    (0x207, "MPI_PACKED", Basic::Packed),
    (0x208, "MPI_SHORT", Basic::Short),
    (0x209, "MPI_INT", Basic::Int),
    (0x20a, "MPI_LONG", Basic::Long),
    (0x20b, "MPI_LONG_LONG", Basic::LongLong),
    (0x20c, "MPI_UNSIGNED_SHORT", Basic::UnsignedShort),
    (0x20d, "MPI_UNSIGNED", Basic::Unsigned),
    (0x20e, "MPI_UNSIGNED_LONG", Basic::UnsignedLong),
    (0x20f, "MPI_UNSIGNED_LONG_LONG", Basic::UnsignedLongLong),
    (0x210, "MPI_FLOAT", Basic::Float),
    (0x212, "MPI_C_FLOAT_COMPLEX", Basic::CFloatComplex),
    (0x213, "MPI_CXX_FLOAT_COMPLEX", Basic::CFloatComplex),
    (0x214, "MPI_DOUBLE", Basic::Double),
    (0x216, "MPI_C_DOUBLE_COMPLEX", Basic::CDoubleComplex),
    (0x217, "MPI_CXX_DOUBLE_COMPLEX", Basic::CDoubleComplex),
    (0x218, "MPI_LOGICAL", Basic::Int32),
    (0x219, "MPI_INTEGER", Basic::Int32),
    (0x21a, "MPI_REAL", Basic::Float),
    (0x21b, "MPI_COMPLEX", Basic::CFloatComplex),
    (0x21c, "MPI_DOUBLE_PRECISION", Basic::Double),
    (0x21d, "MPI_DOUBLE_COMPLEX", Basic::CDoubleComplex),
    (0x21e, "MPI_CHARACTER", Basic::Char),
    (0x220, "MPI_LONG_DOUBLE", Basic::LongDouble),
    (
        0x224,
        "MPI_C_LONG_DOUBLE_COMPLEX",
        Basic::CLongDoubleComplex,
    ),
    (
        0x225,
        "MPI_CXX_LONG_DOUBLE_COMPLEX",
        Basic::CLongDoubleComplex,
    ),
    (0x228, "MPI_FLOAT_INT", Basic::FloatInt),
    (0x229, "MPI_DOUBLE_INT", Basic::DoubleInt),
    (0x22a, "MPI_LONG_INT", Basic::LongInt),
    (0x22b, "MPI_2INT", Basic::TwoInt),
    (0x22c, "MPI_SHORT_INT", Basic::ShortInt),
    (0x22d, "MPI_LONG_DOUBLE_INT", Basic::LongDoubleInt),
    (0x230, "MPI_2REAL", Basic::TwoFloat),
    (0x231, "MPI_2DOUBLE_PRECISION", Basic::TwoDouble),
    (0x232, "MPI_2INTEGER", Basic::TwoInt),
    (0x238, "MPI_C_BOOL", Basic::CBool),
    (0x239, "MPI_CXX_BOOL", Basic::CBool),
    (0x23c, "MPI_WCHAR", Basic::WChar),
    (0x240, "MPI_INT8_T", Basic::Int8),
    (0x241, "MPI_UINT8_T", Basic::UInt8),
    (0x243, "MPI_CHAR", Basic::Char),
    (0x244, "MPI_SIGNED_CHAR", Basic::SignedChar),
    (0x245, "MPI_UNSIGNED_CHAR", Basic::UnsignedChar),
    (0x247, "MPI_BYTE", Basic::Byte),
    (0x248, "MPI_INT16_T", Basic::Int16),
    (0x249, "MPI_UINT16_T", Basic::UInt16),
    (0x250, "MPI_INT32_T", Basic::Int32),
    (0x251, "MPI_UINT32_T", Basic::UInt32),
    (0x258, "MPI_INT64_T", Basic::Int64),
    (0x259, "MPI_UINT64_T", Basic::UInt64),
    (0x2c0, "MPI_LOGICAL1", Basic::Int8),
    (0x2c1, "MPI_INTEGER1", Basic::Int8),
    (0x2c8, "MPI_LOGICAL2", Basic::Int16),
    (0x2c9, "MPI_INTEGER2", Basic::Int16),
    (0x2d0, "MPI_LOGICAL4", Basic::Int32),
    (0x2d1, "MPI_INTEGER4", Basic::Int32),
    (0x2d2, "MPI_REAL4", Basic::Float),
    (0x2d8, "MPI_LOGICAL8", Basic::Int64),
    (0x2d9, "MPI_INTEGER8", Basic::Int64),
    (0x2da, "MPI_REAL8", Basic::Double),
    (0x2db, "MPI_COMPLEX8", Basic::CFloatComplex),
    (0x2e3, "MPI_COMPLEX16", Basic::CDoubleComplex),
];

const PREDEF_BASE: Raw = 0x200;
const PREDEF_END: Raw = 0x300;

fn predefined_table() -> &'static [Option<Arc<Datatype>>] {
    static P: OnceLock<Vec<Option<Arc<Datatype>>>> = OnceLock::new();
    P.get_or_init(|| {
        let mut v = vec![None; PREDEF_END - PREDEF_BASE];
        for &(h, name, b) in PREDEFINED {
            v[h - PREDEF_BASE] = Some(Arc::new(Datatype::predefined(h, name, b)));
        }
        v
    })
}

/// The predefined handle of a value type (its first name in the ABI's list), as a
/// message names the type of the values it carries.
pub fn predefined_for(b: Basic) -> Option<Raw> {
    PREDEFINED.iter().find(|p| p.2 == b).map(|p| p.0)
}

static TYPES: Mutex<Table<Arc<Datatype>>> = Mutex::new(Table::new(Kind::Datatype));

/// The type behind a handle, predefined or derived; `MPI_ERR_TYPE` for anything else
/// (`MPI_DATATYPE_NULL`, a freed type, a handle of another kind).
pub fn lookup(h: Raw) -> Result<Arc<Datatype>, c_int> {
    lookup_ref(h).map(|r| r.arc())
}

/// [`lookup`] lending a predefined type instead of sharing it.
pub fn lookup_ref(h: Raw) -> Result<handle::Ref<Datatype>, c_int> {
    if handle::is_predefined(h) {
        return h
            .checked_sub(PREDEF_BASE)
            .and_then(|i| predefined_table().get(i))
            .and_then(|t| t.as_ref())
            .map(handle::Ref::Static)
            .ok_or(MPI_ERR_TYPE);
    }
    TYPES
        .lock()
        .unwrap()
        .get(h)
        .cloned()
        .map(handle::Ref::Shared)
        .ok_or(MPI_ERR_TYPE)
}

/// A new handle for `t`.
pub(crate) fn register(t: Arc<Datatype>) -> Raw {
    TYPES.lock().unwrap().insert(t)
}

/// Drops the handle `h` of a derived type (operations holding the type keep it alive).
pub(crate) fn release(h: Raw) -> Result<(), c_int> {
    TYPES
        .lock()
        .unwrap()
        .remove(h)
        .map(|_| ())
        .ok_or(MPI_ERR_TYPE)
}

/// Live derived-type handles (for leak checks in tests).
pub fn live_handles() -> usize {
    TYPES.lock().unwrap().len()
}

/// The constructors, on types already looked up; each checks its arguments as the
/// standard asks and returns the uncommitted new type.
pub mod build {
    use super::*;

    fn count(n: c_int) -> Result<usize, c_int> {
        usize::try_from(n).map_err(|_| MPI_ERR_COUNT)
    }

    fn mul(a: isize, b: isize) -> Result<isize, c_int> {
        a.checked_mul(b).ok_or(MPI_ERR_ARG)
    }

    fn env(
        combiner: c_int,
        ints: Vec<c_int>,
        addrs: Vec<isize>,
        types: Vec<Arc<Datatype>>,
    ) -> Envelope {
        Envelope {
            combiner,
            ints,
            addrs,
            types,
        }
    }

    pub fn contiguous(n: c_int, old: &Arc<Datatype>) -> Result<Datatype, c_int> {
        let c = count(n)?;
        let l = Layout::build(
            [Block {
                disp: 0,
                count: c,
                old: old.layout(),
            }],
            false,
        )?
        .inherit(old.layout());
        Ok(Datatype::derived(
            l,
            env(MPI_COMBINER_CONTIGUOUS, vec![n], vec![], vec![old.clone()]),
        ))
    }

    /// `vector` (stride in elements of `old`) and `hvector` (stride in bytes).
    pub fn vector(
        n: c_int,
        blocklen: c_int,
        stride: isize,
        bytes: bool,
        old: &Arc<Datatype>,
    ) -> Result<Datatype, c_int> {
        let c = count(n)?;
        let bl = count(blocklen)?;
        let step = if bytes {
            stride
        } else {
            mul(stride, old.extent())?
        };
        // The last block's displacement fits, so do all the others'.
        mul(c.saturating_sub(1) as isize, step)?;
        let blocks = (0..c as isize).map(|i| Block {
            disp: i * step,
            count: bl,
            old: old.layout(),
        });
        let l = Layout::build(blocks, false)?.inherit(old.layout());
        let e = if bytes {
            env(
                MPI_COMBINER_HVECTOR,
                vec![n, blocklen],
                vec![stride],
                vec![old.clone()],
            )
        } else {
            env(
                MPI_COMBINER_VECTOR,
                vec![n, blocklen, stride as c_int],
                vec![],
                vec![old.clone()],
            )
        };
        Ok(Datatype::derived(l, e))
    }

    /// `indexed`/`hindexed` (`bytes`: displacements in bytes) and their `_block` forms
    /// (`lens` of length one).
    pub fn indexed(
        lens: &[c_int],
        disps: &[isize],
        bytes: bool,
        block: bool,
        old: &Arc<Datatype>,
    ) -> Result<Datatype, c_int> {
        let ext = old.extent();
        let blocks = disps
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                Ok(Block {
                    disp: if bytes { d } else { mul(d, ext)? },
                    count: count(if block { lens[0] } else { lens[i] })?,
                    old: old.layout(),
                })
            })
            .collect::<Result<Vec<_>, c_int>>()?;
        let l = Layout::build(blocks.iter().copied(), false)?.inherit(old.layout());
        let n = disps.len() as c_int;
        let e = match (bytes, block) {
            (false, false) => {
                let mut ints = vec![n];
                ints.extend_from_slice(lens);
                ints.extend(disps.iter().map(|&d| d as c_int));
                env(MPI_COMBINER_INDEXED, ints, vec![], vec![old.clone()])
            }
            (true, false) => {
                let mut ints = vec![n];
                ints.extend_from_slice(lens);
                env(
                    MPI_COMBINER_HINDEXED,
                    ints,
                    disps.to_vec(),
                    vec![old.clone()],
                )
            }
            (false, true) => {
                let mut ints = vec![n, lens[0]];
                ints.extend(disps.iter().map(|&d| d as c_int));
                env(MPI_COMBINER_INDEXED_BLOCK, ints, vec![], vec![old.clone()])
            }
            (true, true) => env(
                MPI_COMBINER_HINDEXED_BLOCK,
                vec![n, lens[0]],
                disps.to_vec(),
                vec![old.clone()],
            ),
        };
        Ok(Datatype::derived(l, e))
    }

    pub fn structure(
        lens: &[c_int],
        disps: &[isize],
        types: &[Arc<Datatype>],
    ) -> Result<Datatype, c_int> {
        let blocks = (0..lens.len())
            .map(|i| {
                Ok(Block {
                    disp: disps[i],
                    count: count(lens[i])?,
                    old: types[i].layout(),
                })
            })
            .collect::<Result<Vec<_>, c_int>>()?;
        let l = Layout::build(blocks.iter().copied(), true)?;
        let mut ints = vec![lens.len() as c_int];
        ints.extend_from_slice(lens);
        Ok(Datatype::derived(
            l,
            env(MPI_COMBINER_STRUCT, ints, disps.to_vec(), types.to_vec()),
        ))
    }

    pub fn resized(old: &Arc<Datatype>, lb: isize, extent: isize) -> Result<Datatype, c_int> {
        let l = old.layout().resized(lb, extent)?;
        Ok(Datatype::derived(
            l,
            env(
                MPI_COMBINER_RESIZED,
                vec![],
                vec![lb, extent],
                vec![old.clone()],
            ),
        ))
    }

    pub fn dup(old: &Arc<Datatype>) -> Datatype {
        let t = Datatype::derived(
            old.layout().clone(),
            env(MPI_COMBINER_DUP, vec![], vec![], vec![old.clone()]),
        );
        if old.committed() {
            t.commit();
        }
        t
    }

    /// Element strides of an array's dimensions, slowest first, in `order`.
    fn dims_c_order<T: Copy>(v: &[T], order: c_int) -> Vec<T> {
        if order == MPI_ORDER_FORTRAN {
            v.iter().rev().copied().collect()
        } else {
            v.to_vec()
        }
    }

    /// The elements at the index sets `idx[d]` (slowest dimension first) of an array of
    /// `sizes` elements of `old`, in memory order, with the array's bounds: the common core
    /// of subarray and darray.
    fn array_selection(
        sizes: &[usize],
        idx: &[Vec<usize>],
        old: &Arc<Datatype>,
    ) -> Result<Layout, c_int> {
        let nd = sizes.len();
        let ext = old.extent();
        let mut stride = vec![ext; nd];
        for d in (0..nd.saturating_sub(1)).rev() {
            stride[d] = mul(
                stride[d + 1],
                isize::try_from(sizes[d + 1]).map_err(|_| MPI_ERR_ARG)?,
            )?;
        }
        let total = mul(
            stride[0],
            isize::try_from(sizes[0]).map_err(|_| MPI_ERR_ARG)?,
        )?;
        // The fastest dimension's indices as ranges of consecutive indices: one block each.
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for &i in &idx[nd - 1] {
            match ranges.last_mut() {
                Some((s, n)) if *s + *n == i => *n += 1,
                _ => ranges.push((i, 1)),
            }
        }
        let mut blocks = Vec::new();
        let mut pos = vec![0usize; nd.saturating_sub(1)];
        if idx.iter().all(|v| !v.is_empty()) {
            loop {
                let mut base = 0isize;
                for d in 0..nd - 1 {
                    base += idx[d][pos[d]] as isize * stride[d];
                }
                for &(s, n) in &ranges {
                    blocks.push(Block {
                        disp: base + s as isize * stride[nd - 1],
                        count: n,
                        old: old.layout(),
                    });
                }
                // Odometer over the slower dimensions, the fastest of them first.
                let mut d = nd - 1;
                loop {
                    if d == 0 {
                        let l = Layout::build(blocks.iter().copied(), false)?;
                        return l.resized(0, total).map(|l| l.inherit(old.layout()));
                    }
                    d -= 1;
                    pos[d] += 1;
                    if pos[d] < idx[d].len() {
                        break;
                    }
                    pos[d] = 0;
                }
            }
        }
        let l = Layout::build([], false)?;
        l.resized(0, total).map(|l| l.inherit(old.layout()))
    }

    pub fn subarray(
        sizes: &[c_int],
        subsizes: &[c_int],
        starts: &[c_int],
        order: c_int,
        old: &Arc<Datatype>,
    ) -> Result<Datatype, c_int> {
        if order != MPI_ORDER_C && order != MPI_ORDER_FORTRAN {
            return Err(MPI_ERR_ARG);
        }
        if sizes.is_empty() {
            return Err(MPI_ERR_DIMS);
        }
        for d in 0..sizes.len() {
            let (n, s, st) = (sizes[d], subsizes[d], starts[d]);
            if n < 1 || s < 1 || s > n || st < 0 || st > n - s {
                return Err(MPI_ERR_ARG);
            }
        }
        let sz: Vec<usize> = dims_c_order(sizes, order)
            .iter()
            .map(|&v| v as usize)
            .collect();
        let idx: Vec<Vec<usize>> = dims_c_order(subsizes, order)
            .iter()
            .zip(dims_c_order(starts, order))
            .map(|(&n, st)| (st as usize..(st + n) as usize).collect())
            .collect();
        let l = array_selection(&sz, &idx, old)?;
        let mut ints = vec![sizes.len() as c_int];
        ints.extend_from_slice(sizes);
        ints.extend_from_slice(subsizes);
        ints.extend_from_slice(starts);
        ints.push(order);
        Ok(Datatype::derived(
            l,
            env(MPI_COMBINER_SUBARRAY, ints, vec![], vec![old.clone()]),
        ))
    }

    /// `MPI_Type_create_darray`: process `rank` of a `psizes` grid (in `order`) holds the
    /// indices its distribution gives it in each dimension.
    #[allow(clippy::too_many_arguments)]
    pub fn darray(
        size: c_int,
        rank: c_int,
        gsizes: &[c_int],
        distribs: &[c_int],
        dargs: &[c_int],
        psizes: &[c_int],
        order: c_int,
        old: &Arc<Datatype>,
    ) -> Result<Datatype, c_int> {
        if order != MPI_ORDER_C && order != MPI_ORDER_FORTRAN {
            return Err(MPI_ERR_ARG);
        }
        let nd = gsizes.len();
        if nd == 0 {
            return Err(MPI_ERR_DIMS);
        }
        if size < 1 || rank < 0 || rank >= size {
            return Err(MPI_ERR_ARG);
        }
        let grid: i64 = psizes.iter().map(|&p| p as i64).product();
        if psizes.iter().any(|&p| p < 1) || grid != size as i64 {
            return Err(MPI_ERR_ARG);
        }
        // Process coordinates: the process grid is always numbered in C order.
        let mut coords = vec![0usize; nd];
        let mut r = rank as usize;
        for d in (0..nd).rev() {
            coords[d] = r % psizes[d] as usize;
            r /= psizes[d] as usize;
        }
        let mut idx = Vec::with_capacity(nd);
        for d in 0..nd {
            let (g, p, c, a) = (gsizes[d], psizes[d] as usize, coords[d], dargs[d]);
            if g < 1 {
                return Err(MPI_ERR_ARG);
            }
            let g = g as usize;
            let v: Vec<usize> = match distribs[d] {
                MPI_DISTRIBUTE_NONE => {
                    if p != 1 {
                        return Err(MPI_ERR_ARG);
                    }
                    (0..g).collect()
                }
                MPI_DISTRIBUTE_BLOCK => {
                    let b = if a == MPI_DISTRIBUTE_DFLT_DARG {
                        g.div_ceil(p)
                    } else {
                        a as usize
                    };
                    if a != MPI_DISTRIBUTE_DFLT_DARG && (a < 1 || b * p < g) {
                        return Err(MPI_ERR_ARG);
                    }
                    (c * b..((c + 1) * b).min(g)).collect()
                }
                MPI_DISTRIBUTE_CYCLIC => {
                    let b = if a == MPI_DISTRIBUTE_DFLT_DARG {
                        1
                    } else {
                        a as usize
                    };
                    if a != MPI_DISTRIBUTE_DFLT_DARG && a < 1 {
                        return Err(MPI_ERR_ARG);
                    }
                    (0..g).filter(|i| (i / b) % p == c).collect()
                }
                _ => return Err(MPI_ERR_ARG),
            };
            idx.push(v);
        }
        let sz: Vec<usize> = dims_c_order(gsizes, order)
            .iter()
            .map(|&v| v as usize)
            .collect();
        let idx = if order == MPI_ORDER_FORTRAN {
            idx.into_iter().rev().collect()
        } else {
            idx
        };
        let l = array_selection(&sz, &idx, old)?;
        let mut ints = vec![size, rank, nd as c_int];
        ints.extend_from_slice(gsizes);
        ints.extend_from_slice(distribs);
        ints.extend_from_slice(dargs);
        ints.extend_from_slice(psizes);
        ints.push(order);
        Ok(Datatype::derived(
            l,
            env(MPI_COMBINER_DARRAY, ints, vec![], vec![old.clone()]),
        ))
    }
}
