//! Every collective's schedule against a sequential reference, with ranks as threads over
//! p2p's loopback transport: p = 1 to 8, roots other than 0, both algorithm families
//! (thresholds forced to either side), `MPI_IN_PLACE`, a non-commutative user operation,
//! a type with gaps (staged through pack/unpack), and non-blocking schedules in flight at
//! once. Each job is bounded by a watchdog.

use std::os::raw::{c_int, c_void};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulkwire_collectives::Thresholds;
use bulkwire_p2p::loopback::{self, Delivery};
use bulkwire_p2p::{Comm, Config as P2pConfig, ReqId, SingleCopy, Source, Tag};

use super::plan::{self, Arg, Blocks, Env, IN_PLACE};
use super::sched::Sched;
use crate::datatype::{self, Datatype};
use crate::error::MPI_ERR_OTHER;
use crate::handle::Raw;
use crate::net::Net;
use crate::op;

const LIMIT: Duration = Duration::from_secs(60);
const INT: Raw = 0x209;
const TWO_INT: Raw = 0x22b;
const DOUBLE_INT: Raw = 0x229;
const SUM: Raw = 0x21;

/// The collective channel of a test: p2p user tags directly.
struct TNet<'a>(&'a Comm);

impl Net for TNet<'_> {
    fn rank(&self) -> u32 {
        self.0.rank()
    }
    fn size(&self) -> u32 {
        self.0.size()
    }
    unsafe fn isend(&self, to: u32, tag: u16, ptr: *const u8, len: usize) -> Result<ReqId, c_int> {
        // SAFETY: forwarded contract.
        unsafe { self.0.isend_raw(to, tag as i32, ptr, len) }.map_err(|_| MPI_ERR_OTHER)
    }
    unsafe fn irecv(&self, from: u32, tag: u16, ptr: *mut u8, cap: usize) -> Result<ReqId, c_int> {
        // SAFETY: forwarded contract.
        unsafe {
            self.0
                .irecv_raw(Source::Rank(from), Tag::Is(tag as i32), ptr, cap)
        }
        .map_err(|_| MPI_ERR_OTHER)
    }
    fn test(&self, id: ReqId) -> Option<Result<usize, c_int>> {
        self.0
            .test_raw(id)
            .map(|r| r.map(|s| s.len).map_err(|_| MPI_ERR_OTHER))
    }
    fn wait(&self, id: ReqId) -> Result<usize, c_int> {
        self.0
            .wait_raw(id)
            .map(|s| s.len)
            .map_err(|_| MPI_ERR_OTHER)
    }
}

struct Rank<'a> {
    net: TNet<'a>,
    me: u32,
    p: u32,
    tag: u16,
    t: Thresholds,
}

impl Rank<'_> {
    fn env(&mut self) -> Env {
        self.tag = self.tag.wrapping_add(1);
        Env {
            me: self.me,
            p: self.p,
            tag: self.tag,
            t: self.t,
        }
    }
    fn run(&self, mut s: Sched) {
        s.run(&self.net).expect("schedule failed");
    }
}

fn small() -> Thresholds {
    Thresholds {
        bcast_long: usize::MAX,
        gather_long: usize::MAX,
        allgather_long: usize::MAX,
        alltoall_long: usize::MAX,
        reduce_long: usize::MAX,
        allreduce_long: usize::MAX,
        ..Thresholds::default()
    }
}

fn large() -> Thresholds {
    Thresholds {
        bcast_long: 0,
        gather_long: 0,
        allgather_long: 0,
        alltoall_long: 0,
        reduce_long: 0,
        allreduce_long: 0,
        ..Thresholds::default()
    }
}

/// Runs `f` on a thread per rank of a loopback job of `p`.
fn job<F>(p: u32, t: Thresholds, f: F)
where
    F: Fn(&mut Rank<'_>) + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let cfg = P2pConfig {
        eager: 4096,
        eager_local: 4096,
        single_copy: SingleCopy::Off,
        progress: Some(Duration::from_millis(1)),
        ..P2pConfig::default()
    };
    let start = Instant::now();
    let hs: Vec<_> = loopback::network(p, Delivery::Whole)
        .into_iter()
        .map(|l| {
            let comm = Comm::from_transport(Box::new(l), &cfg);
            let f = f.clone();
            std::thread::spawn(move || {
                let mut r = Rank {
                    net: TNet(&comm),
                    me: comm.rank(),
                    p,
                    tag: 0,
                    t,
                };
                f(&mut r);
                let _ = comm.flush();
            })
        })
        .collect();
    let mut failed = 0;
    for h in hs {
        while !h.is_finished() {
            assert!(start.elapsed() < LIMIT, "job of {p} timed out");
            std::thread::sleep(Duration::from_millis(1));
        }
        failed += usize::from(h.join().is_err());
    }
    assert_eq!(failed, 0, "{failed} ranks of {p} failed");
}

fn dt(h: Raw) -> Arc<Datatype> {
    datatype::lookup(h).expect("predefined type")
}

fn val(rank: u32, i: usize) -> i32 {
    (rank as i32 + 1) * 1000 + (i as i32) * 7 - 3
}

fn data(rank: u32, n: usize) -> Vec<i32> {
    (0..n).map(|i| val(rank, i)).collect()
}

fn cp(v: &[i32]) -> *const u8 {
    v.as_ptr().cast()
}

fn mp(v: &mut [i32]) -> *mut u8 {
    v.as_mut_ptr().cast()
}

fn sum_red() -> super::sched::Reduction {
    plan::reduction(&op::lookup(SUM).unwrap(), &dt(INT), INT).unwrap()
}

/// An associative operation that is not commutative, on `MPI_2INT`: (a, b) is the map
/// x -> a x + b, and `in op inout` is their composition `in(inout(x))`.
unsafe extern "C" fn compose(a: *mut c_void, b: *mut c_void, len: *mut c_int, _: *mut Raw) {
    // SAFETY: the library passes `len` pairs of ints in each buffer.
    unsafe {
        let n = *len as usize;
        let x = std::slice::from_raw_parts(a.cast::<[i32; 2]>(), n);
        let y = std::slice::from_raw_parts_mut(b.cast::<[i32; 2]>(), n);
        for (x, y) in x.iter().zip(y) {
            *y = [
                x[0].wrapping_mul(y[0]),
                x[0].wrapping_mul(y[1]).wrapping_add(x[1]),
            ];
        }
    }
}

fn compose_ref(x: [i32; 2], y: [i32; 2]) -> [i32; 2] {
    [
        x[0].wrapping_mul(y[0]),
        x[0].wrapping_mul(y[1]).wrapping_add(x[1]),
    ]
}

fn pairs(rank: u32, n: usize) -> Vec<[i32; 2]> {
    (0..n)
        .map(|i| [(rank as i32) * 3 + i as i32 + 2, rank as i32 - 2 * i as i32])
        .collect()
}

fn compose_red() -> super::sched::Reduction {
    let h = op::create(compose, false);
    plan::reduction(&op::lookup(h).unwrap(), &dt(TWO_INT), TWO_INT).unwrap()
}

const SIZES: [usize; 3] = [0, 1, 37];

#[test]
fn barrier_and_bcast() {
    for p in 1..=8 {
        for t in [small(), large()] {
            job(p, t, move |r| {
                let e = r.env();
                r.run(plan::barrier(&e));
                for n in SIZES.into_iter().chain([1000]) {
                    for root in [0, p - 1, p / 2] {
                        let mut v = if r.me == root {
                            data(root, n)
                        } else {
                            vec![0; n]
                        };
                        let e = r.env();
                        // SAFETY: v outlives the schedule.
                        r.run(unsafe { plan::bcast(&e, &Arg::new(cp(&v), n, &dt(INT)), root) });
                        assert_eq!(v, data(root, n), "p {p} root {root} n {n}");
                        let _ = mp(&mut v);
                    }
                }
            });
        }
    }
}

#[test]
fn gather_scatter_and_v() {
    for p in 1..=8 {
        for t in [small(), large()] {
            job(p, t, move |r| {
                let me = r.me;
                for n in SIZES {
                    for root in [p - 1, 0] {
                        // gather, then in place at the root
                        for inplace in [false, true] {
                            let mine = data(me, n);
                            let mut all = vec![0; n * p as usize];
                            if inplace && me == root {
                                all[me as usize * n..][..n].copy_from_slice(&mine);
                            }
                            let send = if inplace && me == root {
                                IN_PLACE
                            } else {
                                cp(&mine)
                            };
                            let e = r.env();
                            // SAFETY: the buffers outlive the schedule.
                            r.run(unsafe {
                                plan::gather(
                                    &e,
                                    &Arg::new(send, n, &dt(INT)),
                                    &Arg::new(mp(&mut all), n, &dt(INT)),
                                    None,
                                    root,
                                )
                            });
                            if me == root {
                                let want: Vec<i32> = (0..p).flat_map(|q| data(q, n)).collect();
                                assert_eq!(all, want, "gather p {p} root {root} n {n}");
                            }
                            // scatter back
                            let mut got = vec![0; n];
                            let src: Vec<i32> = (0..p).flat_map(|q| data(q + 10, n)).collect();
                            let recv = if inplace && me == root {
                                IN_PLACE
                            } else {
                                mp(&mut got)
                            };
                            let e = r.env();
                            // SAFETY: as above.
                            r.run(unsafe {
                                plan::scatter(
                                    &e,
                                    &Arg::new(cp(&src), n, &dt(INT)),
                                    None,
                                    &Arg::new(recv, n, &dt(INT)),
                                    root,
                                )
                            });
                            if !(inplace && me == root) {
                                assert_eq!(got, data(me + 10, n), "scatter p {p} root {root}");
                            }
                        }
                        // v-variants: rank q has q+n elements, placed in reverse order
                        let counts: Vec<usize> = (0..p as usize).map(|q| q + n).collect();
                        let mut displs = vec![0isize; p as usize];
                        let mut at = 0;
                        for q in (0..p as usize).rev() {
                            displs[q] = at;
                            at += counts[q] as isize + 1;
                        }
                        let mine = data(me, counts[me as usize]);
                        let mut all = vec![-1; at as usize];
                        let e = r.env();
                        // SAFETY: as above.
                        r.run(unsafe {
                            plan::gather(
                                &e,
                                &Arg::new(cp(&mine), mine.len(), &dt(INT)),
                                &Arg::new(mp(&mut all), 0, &dt(INT)),
                                Some((&counts, &displs)),
                                root,
                            )
                        });
                        if me == root {
                            for q in 0..p as usize {
                                let d = displs[q] as usize;
                                assert_eq!(&all[d..d + counts[q]], &data(q as u32, counts[q])[..]);
                                assert_eq!(all[d + counts[q]], -1, "gatherv wrote past a block");
                            }
                        }
                        let mut got = vec![0; counts[me as usize]];
                        let e = r.env();
                        // SAFETY: as above.
                        r.run(unsafe {
                            plan::scatter(
                                &e,
                                &Arg::new(cp(&all), 0, &dt(INT)),
                                Some((&counts, &displs)),
                                &Arg::new(mp(&mut got), counts[me as usize], &dt(INT)),
                                root,
                            )
                        });
                        assert_eq!(got, data(me, counts[me as usize]), "scatterv p {p}");
                    }
                }
            });
        }
    }
}

#[test]
fn scatterv_delivers_the_roots_blocks() {
    for p in [1, 3, 5] {
        job(p, small(), move |r| {
            let me = r.me;
            let root = p / 2;
            let counts: Vec<usize> = (0..p as usize).map(|q| 2 * q + 1).collect();
            let displs: Vec<isize> = (0..p as usize).map(|q| (q * q + 3 * q) as isize).collect();
            let len = displs[p as usize - 1] as usize + counts[p as usize - 1];
            let src: Vec<i32> = (0..len as i32).map(|i| i * 11 + 1).collect();
            let mut got = vec![0; counts[me as usize]];
            let e = r.env();
            // SAFETY: the buffers outlive the schedule.
            r.run(unsafe {
                plan::scatter(
                    &e,
                    &Arg::new(cp(&src), 0, &dt(INT)),
                    Some((&counts, &displs)),
                    &Arg::new(mp(&mut got), counts[me as usize], &dt(INT)),
                    root,
                )
            });
            let d = displs[me as usize] as usize;
            assert_eq!(got, src[d..d + counts[me as usize]]);
        });
    }
}

#[test]
fn allgather_and_v() {
    for p in 1..=8 {
        for t in [small(), large()] {
            job(p, t, move |r| {
                let me = r.me;
                for n in SIZES {
                    for inplace in [false, true] {
                        let mine = data(me, n);
                        let mut all = vec![0; n * p as usize];
                        if inplace {
                            all[me as usize * n..][..n].copy_from_slice(&mine);
                        }
                        let e = r.env();
                        let send = if inplace { IN_PLACE } else { cp(&mine) };
                        // SAFETY: the buffers outlive the schedule.
                        r.run(unsafe {
                            plan::allgather(
                                &e,
                                &Arg::new(send, n, &dt(INT)),
                                &Arg::new(mp(&mut all), n, &dt(INT)),
                                None,
                            )
                        });
                        let want: Vec<i32> = (0..p).flat_map(|q| data(q, n)).collect();
                        assert_eq!(all, want, "allgather p {p} n {n} in place {inplace}");
                    }
                    let counts: Vec<usize> = (0..p as usize).map(|q| (q * 3 + n) % 5).collect();
                    let displs: Vec<isize> = counts
                        .iter()
                        .scan(0isize, |a, &c| {
                            let d = *a;
                            *a += c as isize + 2;
                            Some(d)
                        })
                        .collect();
                    let len = displs[p as usize - 1] as usize + counts[p as usize - 1];
                    let mine = data(me, counts[me as usize]);
                    let mut all = vec![-1; len];
                    let e = r.env();
                    // SAFETY: as above.
                    r.run(unsafe {
                        plan::allgather(
                            &e,
                            &Arg::new(cp(&mine), mine.len(), &dt(INT)),
                            &Arg::new(mp(&mut all), 0, &dt(INT)),
                            Some((&counts, &displs)),
                        )
                    });
                    for q in 0..p as usize {
                        let d = displs[q] as usize;
                        assert_eq!(&all[d..d + counts[q]], &data(q as u32, counts[q])[..]);
                    }
                }
            });
        }
    }
}

#[test]
fn alltoall_v_w_and_in_place() {
    for p in 1..=8 {
        for t in [small(), large()] {
            job(p, t, move |r| {
                let me = r.me;
                let pu = p as usize;
                let types = vec![dt(INT); pu];
                for n in SIZES {
                    for inplace in [false, true] {
                        // block for q: data(me*16+q, n)
                        let send: Vec<i32> = (0..p).flat_map(|q| data(me * 16 + q, n)).collect();
                        let mut recv = if inplace {
                            send.clone()
                        } else {
                            vec![0; n * pu]
                        };
                        let counts = vec![n; pu];
                        let displs: Vec<isize> = (0..pu).map(|q| (q * n * 4) as isize).collect();
                        let sp = if inplace { IN_PLACE } else { cp(&send) };
                        let e = r.env();
                        let rp = mp(&mut recv);
                        // SAFETY: the buffers outlive the schedule.
                        r.run(unsafe {
                            plan::alltoall(
                                &e,
                                &Blocks {
                                    ptr: sp,
                                    counts: &counts,
                                    displs: &displs,
                                    types: &types,
                                },
                                &Blocks {
                                    ptr: rp,
                                    counts: &counts,
                                    displs: &displs,
                                    types: &types,
                                },
                            )
                        });
                        let want: Vec<i32> = (0..p).flat_map(|q| data(q * 16 + me, n)).collect();
                        assert_eq!(recv, want, "alltoall p {p} n {n} in place {inplace}");
                    }
                    // v: me sends (me + q) % 3 + n elements to q
                    let sc: Vec<usize> = (0..p).map(|q| ((me + q) % 3) as usize + n).collect();
                    let rc: Vec<usize> = (0..p).map(|q| ((q + me) % 3) as usize + n).collect();
                    let sd: Vec<isize> = (0..pu).map(|q| (q * (n + 3) * 4) as isize).collect();
                    let send: Vec<i32> = (0..p)
                        .flat_map(|q| {
                            let mut b = data(me * 16 + q, sc[q as usize]);
                            b.resize(n + 3, 0);
                            b
                        })
                        .collect();
                    let mut recv = vec![-1; (n + 3) * pu];
                    let e = r.env();
                    let rp = mp(&mut recv);
                    // SAFETY: as above.
                    r.run(unsafe {
                        plan::alltoall(
                            &e,
                            &Blocks {
                                ptr: cp(&send),
                                counts: &sc,
                                displs: &sd,
                                types: &types,
                            },
                            &Blocks {
                                ptr: rp,
                                counts: &rc,
                                displs: &sd,
                                types: &types,
                            },
                        )
                    });
                    for q in 0..pu {
                        let b = &recv[q * (n + 3)..][..rc[q]];
                        assert_eq!(b, &data(q as u32 * 16 + me, rc[q])[..], "alltoallv p {p}");
                    }
                }
            });
        }
    }
}

#[test]
fn reductions_with_sum() {
    for p in 1..=8 {
        for t in [small(), large()] {
            job(p, t, move |r| {
                let me = r.me;
                let pu = p as usize;
                for n in [0, 1, 5, 37] {
                    let want: Vec<i32> = (0..n)
                        .map(|i| {
                            (0..p)
                                .map(|q| val(q, i))
                                .fold(0i32, |a, b| a.wrapping_add(b))
                        })
                        .collect();
                    for inplace in [false, true] {
                        // allreduce
                        let mine = data(me, n);
                        let mut out = if inplace { mine.clone() } else { vec![0; n] };
                        let sp = if inplace { IN_PLACE } else { cp(&mine) };
                        let e = r.env();
                        // SAFETY: the buffers outlive the schedule.
                        r.run(unsafe { plan::reduce(&e, sp, mp(&mut out), n, sum_red(), None) });
                        assert_eq!(out, want, "allreduce p {p} n {n}");
                        // reduce at every root
                        for root in [0, p - 1] {
                            let ip = inplace && me == root;
                            let mut out = if ip { mine.clone() } else { vec![0; n] };
                            let sp = if ip { IN_PLACE } else { cp(&mine) };
                            let e = r.env();
                            // SAFETY: as above.
                            r.run(unsafe {
                                plan::reduce(&e, sp, mp(&mut out), n, sum_red(), Some(root))
                            });
                            if me == root {
                                assert_eq!(out, want, "reduce p {p} root {root} n {n}");
                            }
                        }
                        // scan and exscan
                        for excl in [false, true] {
                            let mut out = if inplace { mine.clone() } else { vec![0; n] };
                            let sp = if inplace { IN_PLACE } else { cp(&mine) };
                            let e = r.env();
                            // SAFETY: as above.
                            r.run(unsafe { plan::scan(&e, sp, mp(&mut out), n, sum_red(), excl) });
                            let upto = if excl { me } else { me + 1 };
                            if upto > 0 {
                                let w: Vec<i32> = (0..n)
                                    .map(|i| (0..upto).map(|q| val(q, i)).sum::<i32>())
                                    .collect();
                                assert_eq!(out, w, "scan p {p} excl {excl} rank {me}");
                            }
                        }
                    }
                    // reduce_scatter with uneven counts, reduce_scatter_block
                    for block in [false, true] {
                        let counts: Vec<usize> = (0..pu)
                            .map(|q| if block { n } else { (q * 2 + n) % 4 })
                            .collect();
                        let total: usize = counts.iter().sum();
                        let mine = data(me, total);
                        let mut out = vec![0; counts[me as usize]];
                        let e = r.env();
                        // SAFETY: as above.
                        r.run(unsafe {
                            plan::reduce_scatter(&e, cp(&mine), mp(&mut out), &counts, sum_red())
                        });
                        let off: usize = counts[..me as usize].iter().sum();
                        let w: Vec<i32> = (off..off + counts[me as usize])
                            .map(|i| (0..p).map(|q| val(q, i)).sum::<i32>())
                            .collect();
                        assert_eq!(out, w, "reduce_scatter p {p} block {block}");
                        // in place
                        let mut io = mine.clone();
                        let e = r.env();
                        // SAFETY: as above.
                        r.run(unsafe {
                            plan::reduce_scatter(&e, IN_PLACE, mp(&mut io), &counts, sum_red())
                        });
                        assert_eq!(io[..counts[me as usize]], w[..]);
                    }
                }
            });
        }
    }
}

fn pair_bytes(v: &mut [[i32; 2]]) -> *mut u8 {
    v.as_mut_ptr().cast()
}

#[test]
fn non_commutative_operations_combine_in_rank_order() {
    for p in 1..=8 {
        for t in [small(), large()] {
            job(p, t, move |r| {
                let me = r.me;
                let n = 3;
                let fold = |upto: u32| -> Vec<[i32; 2]> {
                    (0..n)
                        .map(|i| {
                            (1..upto).fold(pairs(0, n)[i], |a, q| compose_ref(a, pairs(q, n)[i]))
                        })
                        .collect()
                };
                let mut mine = pairs(me, n);
                let mp2 = pair_bytes(&mut mine);
                let all = fold(p);
                let mut out = vec![[0; 2]; n];
                let e = r.env();
                // SAFETY: the buffers outlive the schedule.
                r.run(unsafe {
                    plan::reduce(&e, mp2, pair_bytes(&mut out), n, compose_red(), None)
                });
                assert_eq!(out, all, "allreduce p {p}");
                for root in [p - 1, p / 2] {
                    for inplace in [false, true] {
                        let ip = inplace && me == root;
                        let mut out = if ip { pairs(me, n) } else { vec![[0; 2]; n] };
                        let e = r.env();
                        let sp = if ip { IN_PLACE } else { mp2 };
                        // SAFETY: as above.
                        r.run(unsafe {
                            plan::reduce(&e, sp, pair_bytes(&mut out), n, compose_red(), Some(root))
                        });
                        if me == root {
                            assert_eq!(out, all, "reduce p {p} root {root}");
                        }
                    }
                }
                for excl in [false, true] {
                    let mut out = vec![[0; 2]; n];
                    let e = r.env();
                    // SAFETY: as above.
                    r.run(unsafe {
                        plan::scan(&e, mp2, pair_bytes(&mut out), n, compose_red(), excl)
                    });
                    let upto = if excl { me } else { me + 1 };
                    if upto > 0 {
                        assert_eq!(out, fold(upto), "scan p {p} excl {excl} rank {me}");
                    }
                }
                // reduce_scatter_block with one pair per rank
                let mut mine: Vec<[i32; 2]> =
                    (0..p).map(|q| pairs(me, p as usize)[q as usize]).collect();
                let mut out = vec![[0; 2]; 1];
                let counts = vec![1; p as usize];
                let e = r.env();
                // SAFETY: as above.
                r.run(unsafe {
                    plan::reduce_scatter(
                        &e,
                        pair_bytes(&mut mine),
                        pair_bytes(&mut out),
                        &counts,
                        compose_red(),
                    )
                });
                let i = me as usize;
                let want = (1..p).fold(pairs(0, p as usize)[i], |a, q| {
                    compose_ref(a, pairs(q, p as usize)[i])
                });
                assert_eq!(out[0], want, "reduce_scatter p {p}");
            });
        }
    }
}

#[test]
fn a_type_with_gaps_is_staged() {
    // MPI_DOUBLE_INT: 12 bytes of data in 16; MINLOC on it, and movement.
    for p in [1, 2, 3, 5, 8] {
        for t in [small(), large()] {
            job(p, t, move |r| {
                let me = r.me;
                #[repr(C)]
                #[derive(Clone, Copy, Debug, PartialEq)]
                struct Di {
                    v: f64,
                    i: i32,
                    pad: i32,
                }
                let n = 4;
                let mk = |q: u32| -> Vec<Di> {
                    (0..n)
                        .map(|k| Di {
                            v: ((q as usize * 7 + k * 3) % 5) as f64,
                            i: q as i32,
                            pad: 0x5a5a,
                        })
                        .collect()
                };
                let mine = mk(me);
                let mut out: Vec<Di> = vec![
                    Di {
                        v: 0.0,
                        i: 0,
                        pad: 77
                    };
                    n
                ];
                let red = plan::reduction(&op::lookup(0x38).unwrap(), &dt(DOUBLE_INT), DOUBLE_INT)
                    .unwrap();
                let e = r.env();
                // SAFETY: the buffers outlive the schedule.
                r.run(unsafe {
                    plan::reduce(
                        &e,
                        mine.as_ptr().cast(),
                        out.as_mut_ptr().cast(),
                        n,
                        red,
                        None,
                    )
                });
                for (k, got) in out.iter().enumerate() {
                    let best = (0..p)
                        .map(|q| mk(q)[k])
                        .fold(None::<Di>, |a, x| match a {
                            Some(a) if a.v <= x.v => Some(a),
                            _ => Some(x),
                        })
                        .unwrap();
                    assert_eq!((got.v, got.i), (best.v, best.i), "minloc p {p}");
                    assert_eq!(got.pad, 77, "padding is not data");
                }
                // bcast of the pairs from the last rank
                let mut b = if me == p - 1 { mk(me) } else { out.clone() };
                let e = r.env();
                // SAFETY: as above.
                r.run(unsafe {
                    plan::bcast(
                        &e,
                        &Arg::new(b.as_mut_ptr().cast(), n, &dt(DOUBLE_INT)),
                        p - 1,
                    )
                });
                for (x, y) in b.iter().zip(mk(p - 1)) {
                    assert_eq!((x.v, x.i), (y.v, y.i));
                }
            });
        }
    }
}

#[test]
fn non_blocking_schedules_progress_together() {
    for p in [2, 3, 4, 7] {
        job(p, small(), move |r| {
            let me = r.me;
            let n = 9;
            let mine = data(me, n);
            let mut sums = vec![vec![0; n]; 4];
            let mut bc = if me == 1 % p { data(99, n) } else { vec![0; n] };
            let mut scheds: Vec<Sched> = Vec::new();
            for out in sums.iter_mut() {
                let e = r.env();
                // SAFETY: the buffers outlive the schedules (driven to completion below).
                scheds.push(unsafe { plan::reduce(&e, cp(&mine), mp(out), n, sum_red(), None) });
            }
            let e = r.env();
            // SAFETY: as above.
            scheds.push(unsafe { plan::bcast(&e, &Arg::new(mp(&mut bc), n, &dt(INT)), 1 % p) });
            scheds.push(plan::barrier(&r.env()));
            // Driven in reverse order of posting, without blocking.
            let mut done = vec![false; scheds.len()];
            let start = Instant::now();
            while done.iter().any(|d| !d) {
                for (k, s) in scheds.iter_mut().enumerate().rev() {
                    if !done[k]
                        && let Some(res) = s.progress(&r.net, false)
                    {
                        res.expect("non-blocking collective failed");
                        done[k] = true;
                    }
                }
                assert!(start.elapsed() < LIMIT);
            }
            let want: Vec<i32> = (0..n).map(|i| (0..p).map(|q| val(q, i)).sum()).collect();
            for s in &sums {
                assert_eq!(s, &want);
            }
            assert_eq!(bc, data(99, n));
        });
    }
}

/// `vector(2, 1, 2, MPI_INT)`: two ints with a gap between them (extent 12 bytes), and
/// its handle.
fn gappy() -> (Arc<Datatype>, Raw) {
    let t = datatype::build::vector(2, 1, 2, false, &dt(INT)).expect("vector");
    t.commit();
    let t = Arc::new(t);
    (t.clone(), datatype::register(t))
}

/// A commutative sum that walks `gappy`'s layout, as a user function must.
unsafe extern "C" fn gappy_sum(a: *mut c_void, b: *mut c_void, len: *mut c_int, _: *mut Raw) {
    // SAFETY: `len` elements of 3 ints' extent, data at ints 0 and 2 of each.
    unsafe {
        let (a, b) = (a.cast::<i32>(), b.cast::<i32>());
        for k in 0..*len as usize {
            for j in [3 * k, 3 * k + 2] {
                *b.add(j) = (*a.add(j)).wrapping_add(*b.add(j));
            }
        }
    }
}

/// `n` elements of `gappy` holding rank `q`'s values, gaps set to -7.
fn gappy_data(q: u32, n: usize) -> Vec<i32> {
    (0..3 * n)
        .map(|i| if i % 3 == 1 { -7 } else { val(q, i) })
        .collect()
}

#[test]
fn derived_types_with_gaps() {
    for p in 1..=6 {
        for t in [small(), large()] {
            job(p, t, move |r| {
                let me = r.me;
                let (vt, vh) = gappy();
                let n = 5;
                let want: Vec<i32> = (0..3 * n)
                    .map(|i| {
                        if i % 3 == 1 {
                            -7
                        } else {
                            (0..p).map(|q| val(q, i)).sum()
                        }
                    })
                    .collect();
                let user = op::lookup(op::create(gappy_sum, true)).unwrap();
                for o in [op::lookup(SUM).unwrap(), user] {
                    let red = plan::reduction(&o, &vt, vh).unwrap();
                    let mine = gappy_data(me, n);
                    let mut out: Vec<i32> = vec![-7; 3 * n];
                    let e = r.env();
                    // SAFETY: the buffers outlive the schedule.
                    r.run(unsafe {
                        plan::reduce(&e, cp(&mine), mp(&mut out), n, red.clone(), None)
                    });
                    assert_eq!(out, want, "allreduce p {p} {o:?}");
                    let mut io = gappy_data(me, n);
                    let e = r.env();
                    // SAFETY: as above.
                    r.run(unsafe { plan::scan(&e, IN_PLACE, mp(&mut io), n, red, false) });
                    for (i, x) in io.iter().enumerate() {
                        let w = if i % 3 == 1 {
                            -7
                        } else {
                            (0..=me).map(|q| val(q, i)).sum()
                        };
                        assert_eq!(*x, w, "scan p {p} rank {me}");
                    }
                }
                // bcast and allgather keep the gaps untouched
                let mut b = if me == p - 1 {
                    gappy_data(me, n)
                } else {
                    vec![-7; 3 * n]
                };
                let e = r.env();
                // SAFETY: as above.
                r.run(unsafe { plan::bcast(&e, &Arg::new(mp(&mut b), n, &vt), p - 1) });
                assert_eq!(b, gappy_data(p - 1, n));
                let mine = gappy_data(me, n);
                let mut all = vec![-7; 3 * n * p as usize];
                let e = r.env();
                // SAFETY: as above.
                r.run(unsafe {
                    plan::allgather(
                        &e,
                        &Arg::new(cp(&mine), n, &vt),
                        &Arg::new(mp(&mut all), n, &vt),
                        None,
                    )
                });
                let w: Vec<i32> = (0..p).flat_map(|q| gappy_data(q, n)).collect();
                assert_eq!(all, w, "allgather p {p}");
            });
        }
    }
}

#[test]
fn large_messages_beyond_the_eager_limit() {
    // The test transport's eager limit is 4 KiB: these go by rendezvous, with the default
    // thresholds choosing the large-message algorithms.
    for p in [2, 3, 4, 5] {
        job(p, Thresholds::default(), move |r| {
            let me = r.me;
            let n = 40_000;
            let mut v = if me == 1 { data(1, n) } else { vec![0; n] };
            let e = r.env();
            // SAFETY: the buffers outlive the schedules.
            r.run(unsafe { plan::bcast(&e, &Arg::new(mp(&mut v), n, &dt(INT)), 1) });
            assert_eq!(v, data(1, n));
            let mine = data(me, n);
            let mut out = vec![0; n];
            let e = r.env();
            // SAFETY: as above.
            r.run(unsafe { plan::reduce(&e, cp(&mine), mp(&mut out), n, sum_red(), None) });
            for (i, x) in out.iter().enumerate().step_by(997) {
                assert_eq!(*x, (0..p).map(|q| val(q, i)).sum::<i32>());
            }
            let e = r.env();
            // SAFETY: as above.
            r.run(unsafe { plan::reduce(&e, cp(&mine), mp(&mut out), n, sum_red(), Some(p - 1)) });
            if me == p - 1 {
                for (i, x) in out.iter().enumerate().step_by(991) {
                    assert_eq!(*x, (0..p).map(|q| val(q, i)).sum::<i32>());
                }
            }
            let b = 9000;
            let pu = p as usize;
            let send: Vec<i32> = (0..p).flat_map(|q| data(me * 16 + q, b)).collect();
            let mut recv = vec![0; b * pu];
            let types = vec![dt(INT); pu];
            let counts = vec![b; pu];
            let displs: Vec<isize> = (0..pu).map(|q| (q * b * 4) as isize).collect();
            let e = r.env();
            let rp = mp(&mut recv);
            // SAFETY: as above.
            r.run(unsafe {
                plan::alltoall(
                    &e,
                    &Blocks {
                        ptr: cp(&send),
                        counts: &counts,
                        displs: &displs,
                        types: &types,
                    },
                    &Blocks {
                        ptr: rp,
                        counts: &counts,
                        displs: &displs,
                        types: &types,
                    },
                )
            });
            let want: Vec<i32> = (0..p).flat_map(|q| data(q * 16 + me, b)).collect();
            assert_eq!(recv, want);
        });
    }
}
