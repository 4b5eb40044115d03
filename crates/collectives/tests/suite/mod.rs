//! Every collective against a serial reference, run by each process of a job (threads in
//! `tests/threads.rs`, processes of `coll-probe` in `crates/probes/tests/collectives.rs`). Data depends
//! on (rank, call, index), so any misplaced byte shows; results are compared with what
//! a serial computation over all ranks' inputs gives.

#![allow(dead_code)]

use std::fmt::Debug;

use bulkwire_collectives::{Algorithm, Coll, Datatype, Elem, Op};

/// Bytes of rank `r`'s buffer for call `salt`.
pub fn pat(r: u32, salt: u64, n: usize) -> Vec<u8> {
    let mut x = (r as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ salt.wrapping_mul(0xd1b5_4a32_d192_ed03)
        | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn same(what: &str, got: &[u8], want: &[u8]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} bytes, expected {}",
            got.len(),
            want.len()
        ));
    }
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        return Err(format!(
            "{what}: byte {i} of {} is {:#04x}, expected {:#04x}",
            got.len(),
            got[i],
            want[i]
        ));
    }
    Ok(())
}

fn e(what: &str, r: Result<(), bulkwire_collectives::Error>) -> Result<(), String> {
    r.map_err(|err| format!("{what}: {err}"))
}

/// Roots worth trying among `p`.
fn roots(p: u32) -> Vec<u32> {
    let mut v = vec![0, p - 1, p / 2];
    v.sort();
    v.dedup();
    v
}

/// What [`movement`] did.
pub struct Moved {
    pub checks: usize,
    /// Scatter, gather and alltoall calls that went by single copy
    /// ([`Algorithm::SingleCopy`]).
    pub single_copy: usize,
    /// Broadcast and allgather calls that went by single copy.
    pub shared_copy: usize,
}

/// What [`reductions`] did.
pub struct Reduced {
    pub checks: usize,
    /// Calls that went by single copy.
    pub single_copy: usize,
}

/// The data-movement collectives with blocks of each of `sizes` bytes.
pub fn movement(c: &Coll, sizes: &[usize], salt0: u64) -> Result<Moved, String> {
    let (me, p) = (c.comm().rank(), c.comm().size());
    let pu = p as usize;
    let mut checks = 0;
    let mut single_copy = 0;
    let mut single = |c: &Coll| {
        if c.last_algorithm() == Algorithm::SingleCopy {
            single_copy += 1;
        }
    };
    let mut shared_copy = 0;
    let mut shared = |c: &Coll| {
        if c.last_algorithm() == Algorithm::SingleCopy {
            shared_copy += 1;
        }
    };
    let mut salt = salt0;
    for &n in sizes {
        salt += 1;
        e("barrier", c.barrier())?;
        for root in roots(p) {
            salt += 1;
            // Broadcast.
            let want = pat(root, salt, n);
            let mut buf = if me == root {
                want.clone()
            } else {
                vec![0xAB; n]
            };
            e(
                &format!("broadcast {n} from {root}"),
                c.broadcast(&mut buf, root),
            )?;
            shared(c);
            same(&format!("broadcast {n} from {root}"), &buf, &want)?;
            // Scatter.
            let all = pat(root, salt + 1000, n * pu);
            let send = if me == root { all.clone() } else { Vec::new() };
            let mut recv = vec![0xCD; n];
            e(
                &format!("scatter {n} from {root}"),
                c.scatter(&send, &mut recv, root),
            )?;
            single(c);
            same(
                &format!("scatter {n} from {root}"),
                &recv,
                &all[me as usize * n..(me as usize + 1) * n],
            )?;
            // Gather.
            let mine = pat(me, salt + 2000, n);
            let mut recv = if me == root {
                vec![0xEF; n * pu]
            } else {
                Vec::new()
            };
            e(
                &format!("gather {n} to {root}"),
                c.gather(&mine, &mut recv, root),
            )?;
            single(c);
            if me == root {
                let want: Vec<u8> = (0..p).flat_map(|r| pat(r, salt + 2000, n)).collect();
                same(&format!("gather {n} to {root}"), &recv, &want)?;
            }
            checks += 3;
        }
        // Allgather.
        salt += 1;
        let mine = pat(me, salt, n);
        let mut recv = vec![0x11; n * pu];
        e(&format!("allgather {n}"), c.allgather(&mine, &mut recv))?;
        shared(c);
        let want: Vec<u8> = (0..p).flat_map(|r| pat(r, salt, n)).collect();
        same(&format!("allgather {n}"), &recv, &want)?;
        // Alltoall: block j of rank i is pat(i, salt*.. + j).
        salt += 1;
        let send: Vec<u8> = (0..p)
            .flat_map(|j| pat(me, salt * 64 + j as u64, n))
            .collect();
        let mut recv = vec![0x22; n * pu];
        e(&format!("alltoall {n}"), c.alltoall(&send, &mut recv))?;
        single(c);
        let want: Vec<u8> = (0..p)
            .flat_map(|i| pat(i, salt * 64 + me as u64, n))
            .collect();
        same(&format!("alltoall {n}"), &recv, &want)?;
        // Alltoallv: uneven counts, zeros included; receive blocks in reverse order with
        // gaps that must stay untouched.
        salt += 1;
        let count = |i: u32, j: u32| {
            ((i as usize + 2 * j as usize) % 4) * n / 2 + (i as usize + j as usize) % 2
        };
        let scounts: Vec<usize> = (0..p).map(|j| count(me, j)).collect();
        let mut sdispls = Vec::new();
        let mut at = 0;
        for &k in &scounts {
            sdispls.push(at);
            at += k;
        }
        let send: Vec<u8> = (0..p)
            .flat_map(|j| pat(me, salt * 64 + j as u64, scounts[j as usize]))
            .collect();
        let rcounts: Vec<usize> = (0..p).map(|i| count(i, me)).collect();
        let mut rdispls = vec![0; pu];
        let mut at = 0;
        for i in (0..pu).rev() {
            rdispls[i] = at;
            at += rcounts[i] + 3;
        }
        let mut recv = vec![0xEE; at];
        e(
            &format!("alltoallv {n}"),
            c.alltoallv(&send, &scounts, &sdispls, &mut recv, &rcounts, &rdispls),
        )?;
        let mut want = vec![0xEE; at];
        for i in 0..p {
            let d = rdispls[i as usize];
            want[d..d + rcounts[i as usize]].copy_from_slice(&pat(
                i,
                salt * 64 + me as u64,
                rcounts[i as usize],
            ));
        }
        same(&format!("alltoallv {n}"), &recv, &want)?;
        checks += 4;
    }
    // Typed buffers go through the same paths.
    salt += 1;
    let mut v: Vec<f64> = (0..37)
        .map(|i| {
            if me == 1 % p {
                i as f64 * 0.5 + salt as f64
            } else {
                -1.0
            }
        })
        .collect();
    e("broadcast f64", c.broadcast(&mut v, 1 % p))?;
    shared(c);
    if v.iter()
        .enumerate()
        .any(|(i, &x)| x != i as f64 * 0.5 + salt as f64)
    {
        return Err(format!("broadcast f64: {v:?}"));
    }
    let mine: Vec<u16> = (0..5).map(|i| (me * 100 + i) as u16).collect();
    let mut all = vec![0u16; 5 * pu];
    e("allgather u16", c.allgather(&mine, &mut all))?;
    shared(c);
    for r in 0..p {
        for i in 0..5 {
            if all[(r * 5 + i) as usize] != (r * 100 + i) as u16 {
                return Err(format!("allgather u16: {all:?}"));
            }
        }
    }
    Ok(Moved {
        checks: checks + 2,
        single_copy,
        shared_copy,
    })
}

/// Arithmetic the reference needs, per element type.
pub trait Num: Elem + PartialEq + Debug {
    fn of(v: u8) -> Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn lo(self, o: Self) -> Self;
    fn hi(self, o: Self) -> Self;
}

macro_rules! int_num {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn of(v: u8) -> Self { v as $t }
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn lo(self, o: Self) -> Self { self.min(o) }
            fn hi(self, o: Self) -> Self { self.max(o) }
        }
    )*};
}
int_num!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! float_num {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn of(v: u8) -> Self { v as $t }
            fn add(self, o: Self) -> Self { self + o }
            fn mul(self, o: Self) -> Self { self * o }
            fn lo(self, o: Self) -> Self { self.min(o) }
            fn hi(self, o: Self) -> Self { self.max(o) }
        }
    )*};
}
float_num!(f32, f64);

/// Rank r's input element i: small values, so float sums and products of up to 8
/// processes are exact and the reference's order does not matter.
fn val<T: Num>(r: u32, i: usize, salt: u64) -> T {
    T::of(((r as usize * 3 + i * 7 + salt as usize) % 5 + 1) as u8)
}

/// Counts a call that went by single copy.
fn count_single(c: &Coll, n: &mut usize) {
    if c.last_algorithm() == Algorithm::SingleCopy {
        *n += 1;
    }
}

fn reduce_typed<T: Num>(
    c: &Coll,
    counts: &[usize],
    salt: u64,
    single: &mut usize,
) -> Result<usize, String> {
    let (me, p) = (c.comm().rank(), c.comm().size());
    type Case<T> = (&'static str, Op, fn(T, T) -> T);
    let ops: [Case<T>; 5] = [
        ("sum", Op::Sum, T::add),
        ("min", Op::Min, T::lo),
        ("max", Op::Max, T::hi),
        ("prod", Op::Prod, T::mul),
        ("user sum", Op::user(|a: T, b: T| a.add(b), true), T::add),
    ];
    let mut checks = 0;
    for &n in counts {
        for (k, (name, op, f)) in ops.iter().enumerate() {
            let s = salt + k as u64;
            let mine: Vec<T> = (0..n).map(|i| val(me, i, s)).collect();
            let want: Vec<T> = (0..n)
                .map(|i| (1..p).fold(val::<T>(0, i, s), |acc, r| f(acc, val(r, i, s))))
                .collect();
            let what = format!("allreduce {name} of {n} {:?}", T::TYPE);
            let mut out = vec![T::of(0); n];
            e(&what, c.allreduce(&mine, &mut out, op))?;
            count_single(c, single);
            if out != want {
                return Err(format!("{what}: {out:?}, expected {want:?}"));
            }
            let root = (k as u32 + 1) % p;
            let what = format!("reduce {name} of {n} {:?} to {root}", T::TYPE);
            let mut out = if me == root {
                vec![T::of(0); n]
            } else {
                Vec::new()
            };
            e(&what, c.reduce(&mine, &mut out, op, root))?;
            count_single(c, single);
            if me == root && out != want {
                return Err(format!("{what}: {out:?}, expected {want:?}"));
            }
            checks += 2;
        }
    }
    Ok(checks)
}

/// Affine maps x -> m x + c (mod 2^32) packed as m << 32 | c: composition is
/// associative and not commutative, so a wrong order shows.
fn affine(a: u64, b: u64) -> u64 {
    let (m1, c1) = ((a >> 32) as u32, a as u32);
    let (m2, c2) = ((b >> 32) as u32, b as u32);
    ((m1.wrapping_mul(m2) as u64) << 32) | c1.wrapping_mul(m2).wrapping_add(c2) as u64
}

/// Every type with every built-in and a user operation, and a non-commutative user
/// operation (in place, every root).
pub fn reductions(c: &Coll, counts: &[usize], salt: u64) -> Result<Reduced, String> {
    let mut n = 0;
    let mut single = 0;
    for dt in Datatype::ALL {
        let s = &mut single;
        n += match dt {
            Datatype::I8 => reduce_typed::<i8>(c, counts, salt, s)?,
            Datatype::I16 => reduce_typed::<i16>(c, counts, salt, s)?,
            Datatype::I32 => reduce_typed::<i32>(c, counts, salt, s)?,
            Datatype::I64 => reduce_typed::<i64>(c, counts, salt, s)?,
            Datatype::U8 => reduce_typed::<u8>(c, counts, salt, s)?,
            Datatype::U16 => reduce_typed::<u16>(c, counts, salt, s)?,
            Datatype::U32 => reduce_typed::<u32>(c, counts, salt, s)?,
            Datatype::U64 => reduce_typed::<u64>(c, counts, salt, s)?,
            Datatype::F32 => reduce_typed::<f32>(c, counts, salt, s)?,
            Datatype::F64 => reduce_typed::<f64>(c, counts, salt, s)?,
        };
    }
    let (me, p) = (c.comm().rank(), c.comm().size());
    let op = Op::user(affine, false);
    let x = |r: u32, i: usize| ((3 + 2 * (r as u64 + i as u64)) << 32) | (r as u64 * 7 + i as u64);
    for &cnt in counts {
        let want: Vec<u64> = (0..cnt)
            .map(|i| (1..p).fold(x(0, i), |a, r| affine(a, x(r, i))))
            .collect();
        let mut buf: Vec<u64> = (0..cnt).map(|i| x(me, i)).collect();
        e("allreduce affine", c.allreduce_in_place(&mut buf, &op))?;
        count_single(c, &mut single);
        if buf != want {
            return Err(format!(
                "allreduce affine of {cnt}: {buf:?}, expected {want:?}"
            ));
        }
        for root in roots(p) {
            let mut buf: Vec<u64> = (0..cnt).map(|i| x(me, i)).collect();
            e("reduce affine", c.reduce_in_place(&mut buf, &op, root))?;
            count_single(c, &mut single);
            if me == root && buf != want {
                return Err(format!(
                    "reduce affine of {cnt} to {root}: {buf:?}, expected {want:?}"
                ));
            }
            n += 1;
        }
        n += 1;
    }
    Ok(Reduced {
        checks: n,
        single_copy: single,
    })
}

/// Misuse is refused before any communication, the same on every process.
pub fn misuse(c: &Coll) -> Result<usize, String> {
    let p = c.comm().size();
    let expect_err = |what: &str, r: Result<(), bulkwire_collectives::Error>| match r {
        Err(_) => Ok(()),
        Ok(()) => Err(format!("{what}: accepted")),
    };
    expect_err("root out of range", c.broadcast(&mut [0u8; 4], p))?;
    expect_err("allgather size", c.allgather(&[0u8; 4], &mut [0u8; 3]))?;
    expect_err("alltoall size", c.alltoall(&[0u8; 4], &mut [0u8; 5]))?;
    expect_err(
        "alltoallv counts",
        c.alltoallv(&[0u8; 4], &[1], &[0], &mut [0u8; 4], &[1], &[0])
            .and(if p == 1 {
                Err(bulkwire_collectives::Error::Arg(
                    "p = 1 has one count".into(),
                ))
            } else {
                Ok(())
            }),
    )?;
    // Every process sends itself one element more than it expects from itself.
    let pu = p as usize;
    let me = c.comm().rank() as usize;
    let mut sc = vec![1usize; pu];
    sc[me] = 2;
    let displs: Vec<usize> = (0..pu).map(|j| 2 * j).collect();
    let mut out = vec![0u8; 2 * pu];
    match c.alltoallv(
        &vec![0u8; 2 * pu],
        &sc,
        &displs,
        &mut out,
        &vec![1; pu],
        &displs,
    ) {
        Err(e) if e.to_string().contains("itself") => {}
        other => return Err(format!("alltoallv own block mismatch: {other:?}")),
    }
    expect_err(
        "typed user op on another type",
        c.allreduce_in_place(&mut [0u32; 2], &Op::user(|a: f64, b: f64| a + b, true)),
    )?;
    Ok(6)
}
