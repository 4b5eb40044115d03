use super::build;
use super::*;
use proptest::prelude::*;

fn named(h: Raw) -> Arc<Datatype> {
    lookup(h).unwrap()
}

const INT: Raw = 0x209;
const DOUBLE: Raw = 0x214;
const CHAR: Raw = 0x243;
const FLOAT: Raw = 0x210;

/// The single runs of one element, as the type map's order has them (before
/// `for_each_run` joins the ones that touch).
fn runs(t: &Datatype) -> Vec<(isize, usize)> {
    t.layout().runs.iter().flat_map(|r| r.each()).collect()
}

/// The standard's running example: `{(double, 0), (char, 8)}`, extent 16.
fn double_char() -> Arc<Datatype> {
    let t = build::structure(&[1, 1], &[0, 8], &[named(DOUBLE), named(CHAR)]).unwrap();
    Arc::new(t)
}

#[test]
fn predefined_sizes_and_extents_follow_the_c_abi() {
    for (h, size, extent) in [
        (INT, 4, 4),
        (0x220, 16, 16), // long double
        (0x224, 32, 32), // long double complex
        (0x228, 8, 8),   // float_int
        (0x229, 12, 16), // double_int
        (0x22a, 12, 16), // long_int
        (0x22b, 8, 8),   // 2int
        (0x22c, 6, 8),   // short_int: a hole after the short
        (0x22d, 20, 32), // long_double_int
        (0x23c, 4, 4),   // wchar_t
        (0x201, 8, 8),   // aint
    ] {
        let t = named(h);
        assert_eq!((t.size(), t.extent()), (size, extent), "{}", t.name());
        assert!(t.committed());
    }
    assert_eq!(runs(&named(0x22c)), vec![(0, 2), (4, 4)]);
    assert!(!named(0x22c).contiguous());
    assert!(named(0x228).contiguous());
    assert!(!named(0x229).contiguous(), "the padding is not data");
    assert_eq!(named(0x22b).basic(), Some((Basic::TwoInt, 1)));
    assert_eq!(lookup(MPI_DATATYPE_NULL).unwrap_err(), MPI_ERR_TYPE);
    assert_eq!(lookup(0x101).unwrap_err(), MPI_ERR_TYPE, "a communicator");
    assert_eq!(named(0x219).name(), "MPI_INTEGER");
}

#[test]
fn the_standards_examples() {
    let dc = double_char();
    assert_eq!(
        (dc.size(), dc.lb(), dc.extent()),
        (9, 0, 16),
        "padded to the double"
    );

    // contiguous(3): {(double,0),(char,8),(double,16),(char,24),(double,32),(char,40)}
    let c = build::contiguous(3, &dc).unwrap();
    assert_eq!(runs(&c), vec![(0, 9), (16, 9), (32, 9)]);
    assert_eq!((c.size(), c.extent()), (27, 48));

    // vector(2, 3, 4): blocks of three at 0 and 64
    let v = build::vector(2, 3, 4, false, &dc).unwrap();
    assert_eq!(
        runs(&v),
        vec![(0, 9), (16, 9), (32, 9), (64, 9), (80, 9), (96, 9)]
    );
    assert_eq!((v.size(), v.lb(), v.extent()), (54, 0, 112));

    // hvector(2, 3, 4 bytes): the second block starts inside the first
    let hv = build::vector(2, 3, 4, true, &dc).unwrap();
    assert_eq!(hv.extent(), 52);
    assert_eq!(runs(&hv)[3], (4, 9));

    // indexed({3, 1}, {4, 0}): the later block first in the type map
    let ix = build::indexed(&[3, 1], &[4, 0], false, false, &dc).unwrap();
    assert_eq!(runs(&ix), vec![(64, 9), (80, 9), (96, 9), (0, 9)]);
    assert_eq!((ix.lb(), ix.extent()), (0, 112));

    // struct({2, 1, 3}, {0, 16, 26}, {float, dc, char})
    let st = build::structure(
        &[2, 1, 3],
        &[0, 16, 26],
        &[named(FLOAT), dc.clone(), named(CHAR)],
    )
    .unwrap();
    assert_eq!(runs(&st), vec![(0, 8), (16, 9), (26, 3)]);
    assert_eq!((st.size(), st.lb(), st.extent()), (20, 0, 32));
    assert_eq!(st.true_extent(), 29);
    assert_eq!(st.basic(), None);

    // vector with a negative stride: lb moves below zero
    let neg = build::vector(3, 1, -2, false, &named(INT)).unwrap();
    assert_eq!(runs(&neg), vec![(0, 4), (-8, 4), (-16, 4)]);
    assert_eq!((neg.lb(), neg.extent(), neg.true_lb()), (-16, 20, -16));
    assert_eq!(neg.basic(), Some((Basic::Int, 3)));
}

#[test]
fn runs_merge_and_contiguous_types_send_in_place() {
    let i = named(INT);
    let v = build::vector(4, 2, 2, false, &i).unwrap();
    assert_eq!(runs(&v), vec![(0, 32)], "blocks that touch are one run");
    assert!(v.contiguous());
    let v = build::vector(1000, 2, 3, false, &i).unwrap();
    assert_eq!(runs(&v).len(), 1000);
    assert_eq!(
        v.layout().runs.len(),
        1,
        "a vector's blocks are one strided run"
    );
    assert!(!v.contiguous());
    // A vector of 20 million blocks is described in a few bytes.
    let huge = build::vector(20_000_000, 1, 2, false, &named(0x20b)).unwrap();
    assert_eq!(huge.layout().runs.len(), 1);
    assert_eq!(huge.size(), 160_000_000);
    // A vector of vectors: one strided run per outer block.
    let inner = Arc::new(build::vector(3, 1, 2, false, &i).unwrap());
    let outer = build::vector(4, 1, 2, false, &inner).unwrap();
    assert_eq!(outer.layout().runs.len(), 4);
    assert_eq!(runs(&outer)[..4], [(0, 4), (8, 4), (16, 4), (40, 4)]);
    // A big contiguous type of a contiguous one stays one run.
    let big = Arc::new(build::contiguous(1 << 20, &i).unwrap());
    let bigger = build::contiguous(1 << 10, &big).unwrap();
    assert_eq!(runs(&bigger), vec![(0, 1 << 32)]);
    assert_eq!(bigger.basic(), Some((Basic::Int, 1 << 30)));
}

#[test]
fn resized_types_keep_their_bounds() {
    let r = Arc::new(build::resized(&named(INT), -4, 16).unwrap());
    assert_eq!(
        (r.lb(), r.extent(), r.true_lb(), r.true_extent()),
        (-4, 16, 0, 4)
    );
    let c = build::contiguous(2, &r).unwrap();
    assert_eq!(runs(&c), vec![(0, 4), (16, 4)]);
    assert_eq!((c.lb(), c.extent()), (-4, 32));
    // A struct around a resized type is padded all the same (as MPICH does).
    let s = build::structure(&[1, 1], &[0, 16], &[r.clone(), named(CHAR)]).unwrap();
    assert_eq!((s.lb(), s.extent(), s.true_extent()), (-4, 24, 17));
}

#[test]
fn subarrays_in_both_orders() {
    let i = named(INT);
    let c = build::subarray(&[4, 5], &[2, 3], &[1, 1], MPI_ORDER_C, &i).unwrap();
    assert_eq!(runs(&c), vec![(24, 12), (44, 12)]);
    assert_eq!((c.lb(), c.extent(), c.size()), (0, 80, 24));
    assert_eq!((c.true_lb(), c.true_extent()), (24, 32));
    let f = build::subarray(&[4, 5], &[2, 3], &[1, 1], MPI_ORDER_FORTRAN, &i).unwrap();
    assert_eq!(runs(&f), vec![(20, 8), (36, 8), (52, 8)]);
    assert_eq!(f.extent(), 80);
    let e = f.envelope().unwrap();
    assert_eq!(e.combiner, MPI_COMBINER_SUBARRAY);
    assert_eq!(e.ints, vec![2, 4, 5, 2, 3, 1, 1, MPI_ORDER_FORTRAN]);
    assert_eq!(
        build::subarray(&[4], &[3], &[2], MPI_ORDER_C, &i).unwrap_err(),
        MPI_ERR_ARG
    );
    assert_eq!(
        build::subarray(&[4], &[3], &[0], 7, &i).unwrap_err(),
        MPI_ERR_ARG
    );
    // 3-D: the whole array is one run.
    let w = build::subarray(&[2, 3, 4], &[2, 3, 4], &[0, 0, 0], MPI_ORDER_C, &i).unwrap();
    assert_eq!(runs(&w), vec![(0, 96)]);
}

#[test]
fn darrays_block_and_cyclic() {
    let i = named(INT);
    let dflt = MPI_DISTRIBUTE_DFLT_DARG;
    let cyc = build::darray(
        3,
        1,
        &[10],
        &[MPI_DISTRIBUTE_CYCLIC],
        &[2],
        &[3],
        MPI_ORDER_C,
        &i,
    )
    .unwrap();
    assert_eq!(runs(&cyc), vec![(8, 8), (32, 8)]);
    assert_eq!(cyc.extent(), 40);
    let blk = build::darray(
        3,
        2,
        &[10],
        &[MPI_DISTRIBUTE_BLOCK],
        &[dflt],
        &[3],
        MPI_ORDER_C,
        &i,
    )
    .unwrap();
    assert_eq!(runs(&blk), vec![(32, 8)]);
    // 2x2 grid over a 4x4 array, rank 1 = coordinates (0, 1): rows 0-1, columns 2-3.
    let b2 = build::darray(
        4,
        1,
        &[4, 4],
        &[MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_BLOCK],
        &[dflt, dflt],
        &[2, 2],
        MPI_ORDER_C,
        &i,
    )
    .unwrap();
    assert_eq!(runs(&b2), vec![(8, 8), (24, 8)]);
    // The same in Fortran order: the first array dimension is fastest.
    let f2 = build::darray(
        4,
        1,
        &[4, 4],
        &[MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_BLOCK],
        &[dflt, dflt],
        &[2, 2],
        MPI_ORDER_FORTRAN,
        &i,
    )
    .unwrap();
    assert_eq!(runs(&f2), vec![(32, 8), (48, 8)]);
    assert_eq!(
        build::darray(
            4,
            0,
            &[4],
            &[MPI_DISTRIBUTE_BLOCK],
            &[dflt],
            &[3],
            MPI_ORDER_C,
            &i
        )
        .unwrap_err(),
        MPI_ERR_ARG,
        "the grid has 3 processes, not 4"
    );
}

#[test]
fn get_elements_counts_basic_values() {
    let s = build::structure(&[1, 1], &[0, 8], &[named(INT), named(DOUBLE)]).unwrap();
    assert_eq!(s.size(), 12);
    assert_eq!(s.elements(12), Some(2));
    assert_eq!(s.elements(16), Some(3));
    assert_eq!(s.elements(8), None, "ends inside the double");
    assert_eq!(s.elements(0), Some(0));
    assert_eq!(named(0x22b).elements(16), Some(4), "a pair is two values");
    let v = build::vector(3, 2, 5, false, &named(DOUBLE)).unwrap();
    assert_eq!(v.elements(40), Some(5));
}

#[test]
fn partial_unpack_writes_as_far_as_the_data_goes() {
    let v = build::vector(3, 1, 2, false, &named(INT)).unwrap();
    let data: Vec<u8> = (1..=10).collect();
    let mut buf = [0u8; 20];
    // SAFETY: the type spans 20 bytes.
    unsafe { v.unpack(&data, buf.as_mut_ptr(), 1) };
    assert_eq!(&buf[..4], &[1, 2, 3, 4]);
    assert_eq!(&buf[8..12], &[5, 6, 7, 8]);
    assert_eq!(&buf[16..20], &[9, 10, 0, 0]);
    let mut out = [0u8; 5];
    // SAFETY: as above.
    let n = unsafe { v.pack_into(buf.as_ptr(), 1, 3, &mut out) };
    assert_eq!((n, out), (5, [4, 5, 6, 7, 8]));
}

/// The C functions on valid arguments (their errors are fatal without MPI_Init: the C
/// tests check them under `MPI_ERRORS_RETURN`).
#[test]
fn c_interface() {
    let mut t: Raw = 0;
    // SAFETY: valid pointers throughout.
    unsafe {
        assert_eq!(MPI_Type_vector(3, 1, 2, INT, &mut t), MPI_SUCCESS);
        let mut size = 0;
        assert_eq!(MPI_Type_size(t, &mut size), MPI_SUCCESS);
        assert_eq!(size, 12);
        let data = [1i32, 2, 3, 4, 5];
        let mut packed = [0u8; 12];
        let mut pos = 0;
        assert!(!lookup(t).unwrap().committed());
        assert_eq!(MPI_Type_commit(&mut t), MPI_SUCCESS);
        assert_eq!(
            MPI_Pack(
                data.as_ptr().cast(),
                1,
                t,
                packed.as_mut_ptr().cast(),
                12,
                &mut pos,
                0x101
            ),
            MPI_SUCCESS
        );
        assert_eq!(pos, 12);
        let ints: Vec<i32> = packed
            .chunks(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(ints, vec![1, 3, 5]);
        let mut back = [0i32; 5];
        pos = 0;
        assert_eq!(
            MPI_Unpack(
                packed.as_ptr().cast(),
                12,
                &mut pos,
                back.as_mut_ptr().cast(),
                1,
                t,
                0x101
            ),
            MPI_SUCCESS
        );
        assert_eq!(back, [1, 0, 3, 0, 5]);

        let (mut ni, mut na, mut nd, mut comb) = (0, 0, 0, 0);
        assert_eq!(
            MPI_Type_get_envelope(t, &mut ni, &mut na, &mut nd, &mut comb),
            MPI_SUCCESS
        );
        assert_eq!((ni, na, nd, comb), (3, 0, 1, MPI_COMBINER_VECTOR));
        let mut iv = [0; 3];
        let mut tv = [0usize; 1];
        assert_eq!(
            MPI_Type_get_contents(
                t,
                3,
                0,
                1,
                iv.as_mut_ptr(),
                std::ptr::null_mut(),
                tv.as_mut_ptr()
            ),
            MPI_SUCCESS
        );
        assert_eq!((iv, tv), ([3, 1, 2], [INT]));
        assert_eq!(
            MPI_Type_get_envelope(INT, &mut ni, &mut na, &mut nd, &mut comb),
            MPI_SUCCESS
        );
        assert_eq!(comb, MPI_COMBINER_NAMED);

        assert_eq!(MPI_Type_set_name(t, c"strided".as_ptr()), MPI_SUCCESS);
        let mut name = [0 as c_char; 128];
        let mut len = 0;
        assert_eq!(
            MPI_Type_get_name(t, name.as_mut_ptr(), &mut len),
            MPI_SUCCESS
        );
        assert_eq!(CStr::from_ptr(name.as_ptr()).to_str().unwrap(), "strided");
        assert_eq!(len, 7);

        let mut d: Raw = 0;
        assert_eq!(MPI_Type_dup(t, &mut d), MPI_SUCCESS);
        let keep = t;
        assert_eq!(MPI_Type_free(&mut t), MPI_SUCCESS);
        assert_eq!(t, MPI_DATATYPE_NULL);
        assert_eq!(lookup(keep).unwrap_err(), MPI_ERR_TYPE, "freed");
        assert_eq!(
            MPI_Type_size(d, &mut size),
            MPI_SUCCESS,
            "the dup outlives its parent"
        );
        assert_eq!(size, 12);
        assert!(
            lookup(d).unwrap().committed(),
            "a dup keeps the committed state"
        );
        assert_eq!(MPI_Type_free(&mut d), MPI_SUCCESS);

        let mut m = 0;
        assert_eq!(MPI_Type_match_size(192, 8, &mut m), MPI_SUCCESS);
        assert_eq!(lookup(m).unwrap().size(), 8);

        // Get_elements reads the byte count core keeps in the status.
        let mut status = [0 as c_int; 8];
        status[3] = 20; // the byte count's low half
        let mut n = 0;
        assert_eq!(
            MPI_Get_elements(status.as_ptr().cast(), INT, &mut n),
            MPI_SUCCESS
        );
        assert_eq!(n, 5);
        assert_eq!(
            MPI_Get_elements(status.as_ptr().cast(), DOUBLE, &mut n),
            MPI_SUCCESS
        );
        assert_eq!(n, -32766, "MPI_UNDEFINED");
        let x = 5u64;
        let mut a = 0isize;
        assert_eq!(
            MPI_Get_address((&x as *const u64).cast(), &mut a),
            MPI_SUCCESS
        );
        assert_eq!(MPI_Aint_diff(MPI_Aint_add(a, 24), a), 24);
    }
}

use std::ffi::{CStr, c_char};

// ---- property tests against an independent type map ----

/// A type, as a tree of constructor calls.
#[derive(Clone, Debug)]
enum Spec {
    Named(Raw),
    Contig(u8, Box<Spec>),
    Vector(u8, u8, i8, Box<Spec>),
    HVector(u8, u8, i8, Box<Spec>),
    Indexed(Vec<(u8, i8)>, Box<Spec>),
    Struct(Vec<(u8, i8, Spec)>),
    Resized(i8, u8, Box<Spec>),
    Subarray(Vec<(u8, u8, u8)>, bool, Box<Spec>),
}

/// The standard's definition, entry by entry: (offset, size) of each basic value, the
/// bounds, whether they were set explicitly, the alignment.
#[derive(Clone, Debug)]
struct Map {
    entries: Vec<(isize, usize)>,
    lb: isize,
    ub: isize,
    align: usize,
}

impl Map {
    fn ext(&self) -> isize {
        self.ub - self.lb
    }
    /// Copies of `old` at the given displacements, in order.
    fn of(copies: &[(isize, &Map)]) -> Map {
        let mut m = Map {
            entries: vec![],
            lb: 0,
            ub: 0,
            align: 1,
        };
        let mut first = true;
        for &(d, o) in copies {
            m.entries
                .extend(o.entries.iter().map(|&(off, s)| (off + d, s)));
            m.align = m.align.max(o.align);
            if first {
                (m.lb, m.ub) = (o.lb + d, o.ub + d);
                first = false;
            } else {
                m.lb = m.lb.min(o.lb + d);
                m.ub = m.ub.max(o.ub + d);
            }
        }
        m
    }
}

fn reference(s: &Spec) -> Map {
    match s {
        Spec::Named(h) => {
            let t = named(*h);
            let entries = match t.basic().unwrap().0 {
                Basic::ShortInt => vec![(0, 2), (4, 4)],
                Basic::DoubleInt => vec![(0, 8), (8, 4)],
                b => vec![(0, b.size())],
            };
            Map {
                entries,
                lb: 0,
                ub: t.extent(),
                align: t.basic().unwrap().0.align(),
            }
        }
        Spec::Contig(n, o) => {
            let o = reference(o);
            let c: Vec<_> = (0..*n as isize).map(|k| (k * o.ext(), &o)).collect();
            blocks_or_empty(Map::of(&c), &o)
        }
        Spec::Vector(n, bl, st, o) | Spec::HVector(n, bl, st, o) => {
            let o = reference(o);
            let stride = if matches!(s, Spec::Vector(..)) {
                *st as isize * o.ext()
            } else {
                *st as isize
            };
            let e = o.ext();
            let c: Vec<_> = (0..*n as isize)
                .flat_map(|i| (0..*bl as isize).map(move |j| i * stride + j * e))
                .map(|d| (d, &o))
                .collect();
            blocks_or_empty(Map::of(&c), &o)
        }
        Spec::Indexed(bs, o) => {
            let o = reference(o);
            let c: Vec<_> = bs
                .iter()
                .flat_map(|&(bl, d)| (0..bl as isize).map(move |j| d as isize + j))
                .map(|k| (k * o.ext(), &o))
                .collect();
            blocks_or_empty(Map::of(&c), &o)
        }
        Spec::Struct(bs) => {
            let maps: Vec<(u8, i8, Map)> =
                bs.iter().map(|(b, d, t)| (*b, *d, reference(t))).collect();
            let mut c: Vec<(isize, &Map)> = Vec::new();
            for (bl, d, o) in &maps {
                for j in 0..*bl as isize {
                    c.push((*d as isize * 4 + j * o.ext(), o));
                }
            }
            let mut m = Map::of(&c);
            for (_, _, o) in maps.iter().filter(|b| b.0 > 0) {
                m.align = m.align.max(o.align);
            }
            let a = m.align as isize;
            m.ub += (a - (m.ub - m.lb).rem_euclid(a)) % a;
            m
        }
        Spec::Resized(lb, ext, o) => {
            let mut m = reference(o);
            m.lb = *lb as isize;
            m.ub = *lb as isize + *ext as isize;
            m
        }
        Spec::Subarray(dims, fortran, o) => {
            let o = reference(o);
            // Dimensions as given, slowest first in C order.
            let dims: Vec<(usize, usize, usize)> = dims
                .iter()
                .map(|&(n, s, st)| (n as usize, s as usize, st as usize))
                .collect();
            let cdims: Vec<_> = if *fortran {
                dims.iter().rev().copied().collect()
            } else {
                dims.clone()
            };
            let mut offs = vec![0isize];
            for (d, &(_, sub, st)) in cdims.iter().enumerate() {
                let stride: usize = cdims[d + 1..].iter().map(|x| x.0).product();
                offs = offs
                    .iter()
                    .flat_map(|&b| (st..st + sub).map(move |i| b + (i * stride) as isize))
                    .collect();
            }
            let c: Vec<_> = offs.iter().map(|&k| (k * o.ext(), &o)).collect();
            let mut m = Map::of(&c);
            m.lb = 0;
            m.ub = dims.iter().map(|x| x.0).product::<usize>() as isize * o.ext();
            m
        }
    }
}

/// A type with no copies at all has bounds 0, 0 and the old type's flags.
fn blocks_or_empty(m: Map, o: &Map) -> Map {
    Map {
        align: o.align,
        ..m
    }
}

fn make(s: &Spec) -> Arc<Datatype> {
    Arc::new(match s {
        Spec::Named(h) => return named(*h),
        Spec::Contig(n, o) => build::contiguous(*n as c_int, &make(o)).unwrap(),
        Spec::Vector(n, bl, st, o) => {
            build::vector(*n as c_int, *bl as c_int, *st as isize, false, &make(o)).unwrap()
        }
        Spec::HVector(n, bl, st, o) => {
            build::vector(*n as c_int, *bl as c_int, *st as isize, true, &make(o)).unwrap()
        }
        Spec::Indexed(bs, o) => {
            let lens: Vec<c_int> = bs.iter().map(|b| b.0 as c_int).collect();
            let disps: Vec<isize> = bs.iter().map(|b| b.1 as isize).collect();
            build::indexed(&lens, &disps, false, false, &make(o)).unwrap()
        }
        Spec::Struct(bs) => {
            let lens: Vec<c_int> = bs.iter().map(|b| b.0 as c_int).collect();
            let disps: Vec<isize> = bs.iter().map(|b| b.1 as isize * 4).collect();
            let types: Vec<_> = bs.iter().map(|b| make(&b.2)).collect();
            build::structure(&lens, &disps, &types).unwrap()
        }
        Spec::Resized(lb, ext, o) => build::resized(&make(o), *lb as isize, *ext as isize).unwrap(),
        Spec::Subarray(dims, fortran, o) => {
            let sizes: Vec<c_int> = dims.iter().map(|d| d.0 as c_int).collect();
            let subs: Vec<c_int> = dims.iter().map(|d| d.1 as c_int).collect();
            let starts: Vec<c_int> = dims.iter().map(|d| d.2 as c_int).collect();
            let order = if *fortran {
                MPI_ORDER_FORTRAN
            } else {
                MPI_ORDER_C
            };
            build::subarray(&sizes, &subs, &starts, order, &make(o)).unwrap()
        }
    })
}

fn spec() -> impl Strategy<Value = Spec> {
    let leaf = prop_oneof![
        Just(Spec::Named(CHAR)),
        Just(Spec::Named(0x208)),
        Just(Spec::Named(INT)),
        Just(Spec::Named(DOUBLE)),
        Just(Spec::Named(0x229)),
        Just(Spec::Named(0x22c)),
    ];
    leaf.prop_recursive(3, 24, 3, |inner| {
        let dim = (1u8..4)
            .prop_flat_map(|n| (Just(n), 1..=n))
            .prop_flat_map(|(n, s)| (Just(n), Just(s), 0..=n - s));
        prop_oneof![
            (0u8..4, inner.clone()).prop_map(|(n, o)| Spec::Contig(n, Box::new(o))),
            (0u8..4, 0u8..3, -3i8..4, inner.clone()).prop_map(|(n, b, s, o)| Spec::Vector(
                n,
                b,
                s,
                Box::new(o)
            )),
            (0u8..4, 0u8..3, -20i8..20, inner.clone()).prop_map(|(n, b, s, o)| Spec::HVector(
                n,
                b,
                s,
                Box::new(o)
            )),
            (
                prop::collection::vec((0u8..3, -4i8..5), 0..4),
                inner.clone()
            )
                .prop_map(|(b, o)| Spec::Indexed(b, Box::new(o))),
            prop::collection::vec((0u8..3, -4i8..8, inner.clone()), 1..4).prop_map(Spec::Struct),
            (-8i8..8, 0u8..40, inner.clone()).prop_map(|(l, e, o)| Spec::Resized(
                l,
                e,
                Box::new(o)
            )),
            (prop::collection::vec(dim, 1..4), any::<bool>(), inner)
                .prop_map(|(d, f, o)| Spec::Subarray(d, f, Box::new(o))),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn pack_follows_the_type_map_and_unpack_restores(s in spec(), count in 0usize..3) {
        let t = make(&s);
        let m = reference(&s);
        let size: usize = m.entries.iter().map(|e| e.1).sum();
        prop_assert_eq!(t.size(), size);
        prop_assert_eq!((t.lb(), t.extent()), (m.lb, m.ext()));
        if !m.entries.is_empty() {
            let tlb = m.entries.iter().map(|e| e.0).min().unwrap();
            let tub = m.entries.iter().map(|e| e.0 + e.1 as isize).max().unwrap();
            prop_assert_eq!((t.true_lb(), t.true_extent()), (tlb, tub - tlb));
        }
        prop_assert_eq!(t.elements((size * count) as u64), Some((m.entries.len() * count) as u64));

        // A buffer holding `count` elements, whatever the signs of offsets and extent.
        let ext = m.ext();
        let spots: Vec<isize> = (0..count as isize)
            .flat_map(|k| m.entries.iter().map(move |e| (e.0 + k * ext, e.1)))
            .flat_map(|(o, n)| [o, o + n as isize])
            .collect();
        let lo = spots.iter().copied().min().unwrap_or(0);
        let hi = spots.iter().copied().max().unwrap_or(0);
        let len = (hi - lo) as usize + 16;
        let src: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
        let base = (8 - lo) as usize; // the buffer address the type map is relative to
        let mut expect = Vec::new();
        for k in 0..count as isize {
            for &(o, n) in &m.entries {
                let at = (base as isize + o + k * ext) as usize;
                expect.extend_from_slice(&src[at..at + n]);
            }
        }
        let mut packed = Vec::new();
        // SAFETY: the buffer covers the type map of `count` elements around `base`.
        unsafe { t.pack(src.as_ptr().wrapping_add(base), count, &mut packed) };
        prop_assert_eq!(&packed, &expect);
        if t.contiguous() && count > 0 && size > 0 {
            let at = (base as isize + t.true_lb()) as usize;
            prop_assert_eq!(&src[at..at + size * count], &packed[..]);
        }
        let mut dst = vec![0u8; len];
        // SAFETY: as above.
        unsafe { t.unpack(&packed, dst.as_mut_ptr().wrapping_add(base), count) };
        let mut covered = vec![false; len];
        for k in 0..count as isize {
            for &(o, n) in &m.entries {
                let at = (base as isize + o + k * ext) as usize;
                prop_assert_eq!(&dst[at..at + n], &src[at..at + n]);
                covered[at..at + n].iter_mut().for_each(|c| *c = true);
            }
        }
        for (i, c) in covered.iter().enumerate() {
            if !c {
                prop_assert_eq!(dst[i], 0, "byte {} outside the type map was written", i);
            }
        }
        // external32 there and back restores the type map's bytes too.
        let mut ext = Vec::new();
        // SAFETY: as above.
        unsafe { t.pack_external(src.as_ptr().wrapping_add(base), count, &mut ext) }.unwrap();
        prop_assert_eq!(Some(ext.len()), t.external_size(count));
        let mut dst2 = vec![0u8; len];
        // SAFETY: as above.
        let used = unsafe { t.unpack_external(&ext, dst2.as_mut_ptr().wrapping_add(base), count) }.unwrap();
        prop_assert_eq!(used, ext.len());
        prop_assert_eq!(&dst2, &dst);
        // Packing in pieces gives the same bytes.
        let mut pieces = vec![0u8; packed.len()];
        let mut at = 0;
        while at < packed.len() {
            let n = (packed.len() - at).min(5);
            // SAFETY: as above.
            let w = unsafe { t.pack_into(src.as_ptr().wrapping_add(base), count, at, &mut pieces[at..at + n]) };
            prop_assert_eq!(w, n);
            at += n;
        }
        prop_assert_eq!(pieces, packed);
    }
}

#[test]
fn external32_is_big_endian_with_the_standards_sizes() {
    let v = build::vector(2, 1, 2, false, &named(INT)).unwrap();
    let data = [1i32, -1, 0x0102_0304, -1];
    let mut out = Vec::new();
    // SAFETY: the vector spans 3 ints of `data`.
    unsafe { v.pack_external(data.as_ptr().cast(), 1, &mut out) }.unwrap();
    assert_eq!(out, [0, 0, 0, 1, 1, 2, 3, 4]);
    let mut back = [0i32; 4];
    // SAFETY: as above.
    let used = unsafe { v.unpack_external(&out, back.as_mut_ptr().cast(), 1) }.unwrap();
    assert_eq!((used, back), (8, [1, 0, 0x0102_0304, 0]));
    // long is 4 bytes in external32; a pair type is its two values, without the padding.
    let l = named(0x20a);
    assert_eq!(l.external_size(3), Some(12));
    assert_eq!(named(0x229).external_size(1), Some(12), "MPI_DOUBLE_INT");
    let x = [-2i64];
    let mut out = Vec::new();
    // SAFETY: one long.
    unsafe { l.pack_external(x.as_ptr().cast(), 1, &mut out) }.unwrap();
    assert_eq!(out, [0xff, 0xff, 0xff, 0xfe]);
    let mut y = [0i64];
    // SAFETY: one long.
    unsafe { l.unpack_external(&out, y.as_mut_ptr().cast(), 1) }.unwrap();
    assert_eq!(y, [-2], "sign-extended back");
    let z = named(0x216); // double complex: each half big-endian
    let c = [1.0f64, -2.0];
    let mut out = Vec::new();
    // SAFETY: one double complex.
    unsafe { z.pack_external(c.as_ptr().cast(), 1, &mut out) }.unwrap();
    assert_eq!(&out[..8], &1.0f64.to_be_bytes());
    assert_eq!(&out[8..], &(-2.0f64).to_be_bytes());
    assert_eq!(named(0x220).external_size(1), None, "long double");
}
