//! Each predefined operation on the types it is defined on, against plain Rust arithmetic;
//! the standard's table of what is not defined; MINLOC/MAXLOC's tie rule in both layouts;
//! `long double` through x87; user operations and their order.

use std::os::raw::{c_int, c_void};

use super::*;
use crate::error::{MPI_ERR_OP, MPI_SUCCESS};

fn run(p: Predef, b: Basic, lo: &[u8], hi: &mut [u8], n: usize) -> Result<(), c_int> {
    // SAFETY: the tests pass n whole values in each buffer.
    unsafe { kernel(p, b, lo.as_ptr(), hi.as_mut_ptr(), n, true) }
}

fn bytes<T: Copy>(v: &[T]) -> Vec<u8> {
    // SAFETY: plain numbers, viewed as their bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        .to_vec()
}

fn back<T: Copy + Default>(b: &[u8]) -> Vec<T> {
    let n = b.len() / std::mem::size_of::<T>();
    let mut v = vec![T::default(); n];
    // SAFETY: v has room for exactly b's bytes; T is a plain number.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr().cast::<u8>(), b.len()) };
    v
}

#[test]
fn integer_operations_on_every_integer_type() {
    let lo: Vec<i32> = vec![5, -3, 0, 7, i32::MAX];
    let hi: Vec<i32> = vec![2, 4, 9, 0, 1];
    type F = fn(i32, i32) -> i32;
    let cases: [(Predef, F); 10] = [
        (Predef::Sum, |a, b| a.wrapping_add(b)),
        (Predef::Prod, |a, b| a.wrapping_mul(b)),
        (Predef::Min, |a, b| a.min(b)),
        (Predef::Max, |a, b| a.max(b)),
        (Predef::Band, |a, b| a & b),
        (Predef::Bor, |a, b| a | b),
        (Predef::Bxor, |a, b| a ^ b),
        (Predef::Land, |a, b| ((a != 0) && (b != 0)) as i32),
        (Predef::Lor, |a, b| ((a != 0) || (b != 0)) as i32),
        (Predef::Lxor, |a, b| ((a != 0) != (b != 0)) as i32),
    ];
    for (p, f) in cases {
        for b in [Basic::Int, Basic::Int32, Basic::WChar] {
            let mut h = bytes(&hi);
            run(p, b, &bytes(&lo), &mut h, lo.len()).unwrap();
            let want: Vec<i32> = lo.iter().zip(&hi).map(|(&a, &b)| f(a, b)).collect();
            assert_eq!(back::<i32>(&h), want, "{p:?} on {b:?}");
        }
        // The same on 64 and 8 bits, signed and unsigned.
        let l64: Vec<i64> = lo.iter().map(|&x| x as i64 * 3).collect();
        let h64: Vec<i64> = hi.iter().map(|&x| x as i64 - 1).collect();
        for b in [
            Basic::Long,
            Basic::LongLong,
            Basic::Int64,
            Basic::Aint,
            Basic::Count,
        ] {
            let mut h = bytes(&h64);
            run(p, b, &bytes(&l64), &mut h, l64.len()).unwrap();
            for ((&a, &c), got) in l64.iter().zip(&h64).zip(back::<i64>(&h)) {
                let want = match p {
                    Predef::Sum => a.wrapping_add(c),
                    Predef::Prod => a.wrapping_mul(c),
                    Predef::Min => a.min(c),
                    Predef::Max => a.max(c),
                    Predef::Band => a & c,
                    Predef::Bor => a | c,
                    Predef::Bxor => a ^ c,
                    Predef::Land => ((a != 0) && (c != 0)) as i64,
                    Predef::Lor => ((a != 0) || (c != 0)) as i64,
                    _ => ((a != 0) != (c != 0)) as i64,
                };
                assert_eq!(got, want, "{p:?} on {b:?}");
            }
        }
        let l8: Vec<u8> = vec![200, 3, 0, 255];
        let h8: Vec<u8> = vec![100, 7, 9, 0];
        for b in [Basic::UnsignedChar, Basic::UInt8] {
            let mut h = h8.clone();
            run(p, b, &l8, &mut h, 4).unwrap();
            for ((&a, &c), &got) in l8.iter().zip(&h8).zip(&h) {
                let want = match p {
                    Predef::Sum => a.wrapping_add(c),
                    Predef::Prod => a.wrapping_mul(c),
                    Predef::Min => a.min(c),
                    Predef::Max => a.max(c),
                    Predef::Band => a & c,
                    Predef::Bor => a | c,
                    Predef::Bxor => a ^ c,
                    Predef::Land => ((a != 0) && (c != 0)) as u8,
                    Predef::Lor => ((a != 0) || (c != 0)) as u8,
                    _ => ((a != 0) != (c != 0)) as u8,
                };
                assert_eq!(got, want, "{p:?} on {b:?}");
            }
        }
    }
}

#[test]
fn floating_point_and_complex() {
    let lo = [1.5f64, -2.0, 3.0];
    let hi = [2.0f64, 8.0, -1.0];
    for (p, f) in [
        (Predef::Sum, (|a, b| a + b) as fn(f64, f64) -> f64),
        (Predef::Prod, |a, b| a * b),
        (Predef::Min, f64::min),
        (Predef::Max, f64::max),
    ] {
        let mut h = bytes(&hi);
        run(p, Basic::Double, &bytes(&lo), &mut h, 3).unwrap();
        let want: Vec<f64> = lo.iter().zip(&hi).map(|(&a, &b)| f(a, b)).collect();
        assert_eq!(back::<f64>(&h), want);
        let (l32, h32): (Vec<f32>, Vec<f32>) = (
            lo.iter().map(|&x| x as f32).collect(),
            hi.iter().map(|&x| x as f32).collect(),
        );
        let mut h = bytes(&h32);
        run(p, Basic::Float, &bytes(&l32), &mut h, 3).unwrap();
        let want: Vec<f32> = want.iter().map(|&x| x as f32).collect();
        assert_eq!(back::<f32>(&h), want);
    }
    // (1 + 2i)(3 - 1i) = 5 + 5i; sum 4 + 1i
    {
        let b = Basic::CDoubleComplex;
        let mut h = bytes(&[3.0f64, -1.0]);
        run(Predef::Prod, b, &bytes(&[1.0f64, 2.0]), &mut h, 1).unwrap();
        assert_eq!(back::<f64>(&h), [5.0, 5.0]);
        let mut h = bytes(&[3.0f64, -1.0]);
        run(Predef::Sum, b, &bytes(&[1.0f64, 2.0]), &mut h, 1).unwrap();
        assert_eq!(back::<f64>(&h), [4.0, 1.0]);
    }
    let mut h = bytes(&[3.0f32, -1.0]);
    run(
        Predef::Prod,
        Basic::CFloatComplex,
        &bytes(&[1.0f32, 2.0]),
        &mut h,
        1,
    )
    .unwrap();
    assert_eq!(back::<f32>(&h), [5.0, 5.0]);
}

/// An x87 extended value (in a 16-byte slot) of a normal, non-zero double.
fn f80(x: f64) -> [u8; 16] {
    let bits = x.to_bits();
    let sign = (bits >> 63) as u16;
    let exp = ((bits >> 52) & 0x7ff) as u16;
    let frac = bits & ((1 << 52) - 1);
    let mant: u64 = (1 << 63) | (frac << 11);
    let se: u16 = (sign << 15) | (exp + 16383 - 1023);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&mant.to_le_bytes());
    out[8..10].copy_from_slice(&se.to_le_bytes());
    out
}

#[test]
#[cfg(target_arch = "x86_64")]
fn long_double_in_extended_precision() {
    let mut h = f80(2.5).to_vec();
    run(Predef::Sum, Basic::LongDouble, &f80(1.25), &mut h, 1).unwrap();
    assert_eq!(h[..10], f80(3.75)[..10]);
    let mut h = f80(-4.0).to_vec();
    run(Predef::Prod, Basic::LongDouble, &f80(0.5), &mut h, 1).unwrap();
    assert_eq!(h[..10], f80(-2.0)[..10]);
    let mut h = f80(-4.0).to_vec();
    run(Predef::Max, Basic::LongDouble, &f80(0.5), &mut h, 1).unwrap();
    assert_eq!(h[..10], f80(0.5)[..10]);
    let mut h = f80(-4.0).to_vec();
    run(Predef::Min, Basic::LongDouble, &f80(0.5), &mut h, 1).unwrap();
    assert_eq!(h[..10], f80(-4.0)[..10]);
    // 1 + 2^-60 is exact in 64 bits of mantissa, not in a double's 53.
    let mut one = f80(1.0);
    let tiny = f80(2f64.powi(-60));
    run(Predef::Sum, Basic::LongDouble, &tiny, &mut one, 1).unwrap();
    assert_eq!(
        u64::from_le_bytes(one[..8].try_into().unwrap()),
        (1 << 63) | 8
    );
    // complex long double: (1 + 2i)(3 - 1i) = 5 + 5i
    let mut a = [0u8; 32];
    a[..16].copy_from_slice(&f80(1.0));
    a[16..].copy_from_slice(&f80(2.0));
    let mut b = [0u8; 32];
    b[..16].copy_from_slice(&f80(3.0));
    b[16..].copy_from_slice(&f80(-1.0));
    run(Predef::Prod, Basic::CLongDoubleComplex, &a, &mut b, 1).unwrap();
    assert_eq!(b[..10], f80(5.0)[..10]);
    assert_eq!(b[16..26], f80(5.0)[..10]);
}

#[test]
fn the_standards_table_refuses_what_is_not_defined() {
    let x = [0u8; 64];
    let mut y = [0u8; 64];
    for (p, b) in [
        (Predef::Band, Basic::Double),
        (Predef::Land, Basic::Float),
        (Predef::Sum, Basic::CBool),
        (Predef::Sum, Basic::Byte),
        (Predef::Max, Basic::CDoubleComplex),
        (Predef::MinLoc, Basic::Int),
        (Predef::Sum, Basic::TwoInt),
        (Predef::Lor, Basic::Byte),
    ] {
        assert_eq!(run(p, b, &x, &mut y, 2), Err(MPI_ERR_OP), "{p:?} on {b:?}");
    }
    for (p, b) in [
        (Predef::Land, Basic::CBool),
        (Predef::Bor, Basic::Byte),
        (Predef::MaxLoc, Basic::ShortInt),
        (Predef::Replace, Basic::DoubleInt),
        (Predef::NoOp, Basic::CFloatComplex),
    ] {
        assert_eq!(run(p, b, &x, &mut y, 2), Ok(()), "{p:?} on {b:?}");
    }
}

#[test]
fn minloc_and_maxloc_break_ties_by_the_smaller_index() {
    // MPI_2INT packed and laid out alike: (value, index)
    let lo = bytes(&[5i32, 9, 3, 1, 3, 4, 7, 2]);
    let hi = bytes(&[5i32, 2, 4, 0, 3, 6, 7, 8]);
    let mut h = hi.clone();
    run(Predef::MinLoc, Basic::TwoInt, &lo, &mut h, 4).unwrap();
    assert_eq!(back::<i32>(&h), [5, 2, 3, 1, 3, 4, 7, 2]);
    let mut h = hi.clone();
    run(Predef::MaxLoc, Basic::TwoInt, &lo, &mut h, 4).unwrap();
    assert_eq!(back::<i32>(&h), [5, 2, 4, 0, 3, 4, 7, 2]);
    // MPI_SHORT_INT in C's layout: short at 0, int at 4.
    let mk = |v: i16, i: i32| {
        let mut b = [0u8; 8];
        b[..2].copy_from_slice(&v.to_ne_bytes());
        b[4..].copy_from_slice(&i.to_ne_bytes());
        b
    };
    let lo = [mk(-1, 7), mk(4, 9)].concat();
    let mut h = [mk(-1, 3), mk(2, 1)].concat();
    // SAFETY: two values of 8 bytes each in C's layout.
    unsafe {
        kernel(
            Predef::MaxLoc,
            Basic::ShortInt,
            lo.as_ptr(),
            h.as_mut_ptr(),
            2,
            false,
        )
    }
    .unwrap();
    assert_eq!(h, [mk(-1, 3), mk(4, 9)].concat());
    // MPI_DOUBLE_INT packed (12 bytes) vs laid out (16).
    let mut lo = Vec::new();
    lo.extend_from_slice(&2.0f64.to_ne_bytes());
    lo.extend_from_slice(&5i32.to_ne_bytes());
    let mut h = Vec::new();
    h.extend_from_slice(&2.0f64.to_ne_bytes());
    h.extend_from_slice(&8i32.to_ne_bytes());
    run(Predef::MinLoc, Basic::DoubleInt, &lo, &mut h, 1).unwrap();
    assert_eq!(i32::from_ne_bytes(h[8..12].try_into().unwrap()), 5);
    // MPI_2DOUBLE_PRECISION: the index is a double too.
    let lo = bytes(&[1.0f64, 3.0, 2.0, 9.0]);
    let mut h = bytes(&[1.0f64, 2.0, 5.0, 1.0]);
    run(Predef::MaxLoc, Basic::TwoDouble, &lo, &mut h, 2).unwrap();
    assert_eq!(back::<f64>(&h), [1.0, 2.0, 5.0, 1.0]);
    run(Predef::MinLoc, Basic::TwoDouble, &lo, &mut h, 2).unwrap();
    assert_eq!(back::<f64>(&h), [1.0, 2.0, 2.0, 9.0]);
    let mut lo = f80(-1.0).to_vec();
    lo.extend_from_slice(&4i32.to_ne_bytes());
    let mut h = f80(3.0).to_vec();
    h.extend_from_slice(&1i32.to_ne_bytes());
    run(Predef::MinLoc, Basic::LongDoubleInt, &lo, &mut h, 1).unwrap();
    assert_eq!(h[..10], f80(-1.0)[..10]);
    assert_eq!(i32::from_ne_bytes(h[16..20].try_into().unwrap()), 4);
}

/// `inout = in - inout`: neither commutative nor anything else, so the order shows.
unsafe extern "C" fn minus(a: *mut c_void, b: *mut c_void, len: *mut c_int, dt: *mut Raw) {
    // SAFETY: the library passes `len` ints in each buffer.
    unsafe {
        assert_eq!(*dt, 0x209, "the user function sees the type's handle");
        let n = *len as usize;
        let x = std::slice::from_raw_parts(a.cast::<i32>(), n);
        let y = std::slice::from_raw_parts_mut(b.cast::<i32>(), n);
        for (x, y) in x.iter().zip(y) {
            *y = x - *y;
        }
    }
}

#[test]
fn user_operations_through_the_c_calls() {
    let mut h: Raw = 0;
    // SAFETY: valid pointers throughout.
    unsafe {
        assert_eq!(MPI_Op_create(Some(minus), 0, &mut h), MPI_SUCCESS);
        let mut c = 7;
        assert_eq!(MPI_Op_commutative(h, &mut c), MPI_SUCCESS);
        assert_eq!(c, 0);
        assert_eq!(
            MPI_Op_commutative(Predef::Sum.handle(), &mut c),
            MPI_SUCCESS
        );
        assert_eq!(c, 1);
        let a = [10i32, 20];
        let mut b = [1i32, 2];
        let r = MPI_Reduce_local(a.as_ptr().cast(), b.as_mut_ptr().cast(), 2, 0x209, h);
        assert_eq!(r, MPI_SUCCESS);
        assert_eq!(b, [9, 18]);
        let r = MPI_Reduce_local(a.as_ptr().cast(), b.as_mut_ptr().cast(), 2, 0x209, 0x21);
        assert_eq!(r, MPI_SUCCESS);
        assert_eq!(b, [19, 38]);
        // BAND on double: not defined (the C call would go to the error handler, which
        // aborts without MPI_Init).
        let d = [1.0f64];
        let mut e = [2.0f64];
        let dbl = crate::datatype::lookup(0x214).unwrap();
        let band = lookup(Predef::Band.handle()).unwrap();
        let r = band.apply_handle(d.as_ptr().cast(), e.as_mut_ptr().cast(), 1, &dbl, 0x214);
        assert_eq!(r, Err(MPI_ERR_OP));
        let (held, orig) = (lookup(h).unwrap(), h);
        assert_eq!(MPI_Op_free(&mut h), MPI_SUCCESS);
        assert_eq!(h, MPI_OP_NULL);
        assert!(!held.commutative(), "a reference outlives the handle");
        assert_eq!(
            free(Predef::Sum.handle()),
            Err(MPI_ERR_OP),
            "predefined operations stay"
        );
        assert_eq!(free(orig), Err(MPI_ERR_OP), "freed twice");
        assert_eq!(lookup(MPI_OP_NULL).err(), Some(MPI_ERR_OP));
    }
}

#[test]
fn the_collectives_layer_gets_the_same_operations() {
    let sum = lookup(Predef::Sum.handle()).unwrap();
    assert!(matches!(
        sum.for_collectives(Basic::Int),
        Some((bulkwire_collectives::Op::Sum, CDt::I32))
    ));
    let band = lookup(Predef::Band.handle()).unwrap();
    let (op, dt) = band.for_collectives(Basic::UInt16).unwrap();
    assert_eq!(dt, CDt::U16);
    assert!(op.is_commutative());
    assert!(
        lookup(Predef::MinLoc.handle())
            .unwrap()
            .for_collectives(Basic::TwoInt)
            .is_none()
    );
    assert!(sum.for_collectives(Basic::CDoubleComplex).is_none());
    assert!(band.for_collectives(Basic::Double).is_none());
}

#[test]
fn accumulate_applies_packed_values() {
    let int = crate::datatype::lookup(0x209).unwrap();
    let mut io = bytes(&[1i32, 2, 3]);
    apply_packed_values(
        Predef::Sum.handle(),
        &int,
        &bytes(&[10i32, 20, 30]),
        &mut io,
    )
    .unwrap();
    assert_eq!(back::<i32>(&io), [11, 22, 33]);
    apply_packed_values(
        Predef::Replace.handle(),
        &int,
        &bytes(&[7i32, 8, 9]),
        &mut io,
    )
    .unwrap();
    assert_eq!(back::<i32>(&io), [7, 8, 9]);
    let h = create(minus, false);
    assert_eq!(
        apply_packed_values(h, &int, &bytes(&[1i32]), &mut io),
        Err(MPI_ERR_OP)
    );
}
