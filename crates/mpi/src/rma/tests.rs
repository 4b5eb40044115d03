//! Windows between ranks as threads over p2p's in-memory loopback transport.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bulkwire_p2p::loopback::{self, Delivery};
use bulkwire_p2p::{Comm, Config, SingleCopy};

use super::*;
use crate::datatype::build;

const LIMIT: Duration = Duration::from_secs(30);
const INT: Raw = 0x209;
const SUM: Raw = 0x21;

fn world(n: u32, eager: usize) -> Vec<&'static Comm> {
    let cfg = Config {
        eager,
        eager_local: eager,
        single_copy: SingleCopy::Off,
        split: usize::MAX,
        progress: Some(Duration::from_millis(1)),
        job: Default::default(),
    };
    loopback::network(n, Delivery::Whole)
        .into_iter()
        .map(|t| &*Box::leak(Box::new(Comm::from_transport(Box::new(t), &cfg))))
        .collect()
}

/// Runs `f(comm, rank)` on a thread per rank; a hang fails the test.
fn run(n: u32, eager: usize, f: impl Fn(&'static Comm, u32) + Send + Sync + 'static) {
    let f = Arc::new(f);
    let start = Instant::now();
    let hs: Vec<_> = world(n, eager)
        .into_iter()
        .enumerate()
        .map(|(r, c)| {
            let f = f.clone();
            std::thread::spawn(move || f(c, r as u32))
        })
        .collect();
    for h in hs {
        while !h.is_finished() {
            assert!(start.elapsed() < LIMIT, "a rank hangs");
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Err(e) = h.join() {
            std::panic::resume_unwind(e);
        }
    }
}

fn window(c: &'static Comm, me: u32, buf: &mut [i32]) -> Arc<Window> {
    let n = c.size();
    let ch = Channel {
        p2p: c,
        ranks: (0..n).collect(),
        me,
        ctx: 7,
    };
    let base = buf.as_mut_ptr() as usize;
    Window::create(
        ch,
        base,
        std::mem::size_of_val(buf),
        4,
        MPI_WIN_FLAVOR_CREATE,
        None,
        0,
    )
    .unwrap()
}

fn int() -> Arc<Datatype> {
    crate::datatype::lookup(INT).unwrap()
}

fn put(w: &Window, data: &[i32], target: u32, disp: isize) -> Result<(), Failure> {
    let t = int();
    // SAFETY: `data` holds data.len() ints.
    unsafe {
        w.put(
            "put",
            data.as_ptr().cast(),
            data.len(),
            &t,
            target as c_int,
            disp,
            data.len(),
            &t,
            None,
        )
    }
}

fn get(w: &Window, into: &mut [i32], target: u32, disp: isize) {
    let t = int();
    // SAFETY: `into` lives until the epoch ends in each test.
    unsafe {
        w.get(
            "get",
            into.as_mut_ptr().cast(),
            into.len(),
            &t,
            target as c_int,
            disp,
            into.len(),
            &t,
            None,
            None,
        )
    }
    .unwrap();
}

#[test]
fn fence_epochs_put_and_get_around_a_ring() {
    for eager in [1 << 16, 64] {
        // eager 64: the puts and replies of more than 64 bytes go by rendezvous
        run(3, eager, |c, me| {
            let n = 3;
            let mut buf = vec![0i32; 64];
            let w = window(c, me, &mut buf);
            w.fence(0).unwrap();
            let next = (me + 1) % n;
            let data: Vec<i32> = (0..20).map(|k| (me * 100 + k) as i32).collect();
            put(&w, &data, next, (me * 20) as isize).unwrap();
            w.fence(0).unwrap();
            let prev = (me + n - 1) % n;
            for k in 0..20 {
                assert_eq!(buf[(prev * 20 + k) as usize], (prev * 100 + k) as i32);
            }
            let mut got = vec![0i32; 64];
            get(&w, &mut got, next, 0);
            w.fence(0).unwrap();
            let me_slot = (me * 20) as usize;
            assert_eq!(
                &got[me_slot..me_slot + 20],
                &data[..],
                "read back from the next rank"
            );
            w.fence(MPI_MODE_NOSUCCEED).unwrap();
            w.free().unwrap();
        });
    }
}

#[test]
fn accumulates_from_everyone_add_up_with_strided_types() {
    run(4, 1 << 16, |c, me| {
        let mut buf = vec![0i32; 16];
        let w = window(c, me, &mut buf);
        w.fence(0).unwrap();
        // Every rank adds me+1 to the even slots of rank 0, ten times, the target's
        // layout a vector, the origin's contiguous.
        let vec = build::vector(8, 1, 2, false, &int()).unwrap();
        vec.commit();
        let data = [(me + 1) as i32; 8];
        for _ in 0..10 {
            // SAFETY: `data` holds 8 ints.
            unsafe {
                w.put(
                    "acc",
                    data.as_ptr().cast(),
                    8,
                    &int(),
                    0,
                    0,
                    1,
                    &vec,
                    Some((SUM, INT)),
                )
            }
            .unwrap();
        }
        w.fence(0).unwrap();
        if me == 0 {
            for (i, v) in buf.iter().enumerate() {
                assert_eq!(*v, if i % 2 == 0 { 100 } else { 0 }, "slot {i}");
            }
        }
        w.fence(MPI_MODE_NOSUCCEED).unwrap();
        w.free().unwrap();
    });
}

#[test]
fn exclusive_locks_serialise_read_modify_write() {
    run(3, 1 << 16, |c, me| {
        let mut buf = vec![0i32; 4];
        let w = window(c, me, &mut buf);
        for _ in 0..20 {
            w.lock(MPI_LOCK_EXCLUSIVE, 0).unwrap();
            let mut v = [0i32; 1];
            get(&w, &mut v, 0, 0);
            w.flush(Some(0)).unwrap();
            put(&w, &[v[0] + 1], 0, 0).unwrap();
            w.unlock(0).unwrap();
        }
        w.fence(0).unwrap();
        if me == 0 {
            assert_eq!(buf[0], 60, "every increment under the lock counted");
        }
        w.fence(MPI_MODE_NOSUCCEED).unwrap();
        w.free().unwrap();
    });
}

#[test]
fn fetch_and_op_and_compare_and_swap_are_atomic() {
    run(3, 1 << 16, |c, me| {
        let mut buf = vec![0i32; 4];
        let w = window(c, me, &mut buf);
        w.lock_all().unwrap();
        let t = int();
        let mut seen = Vec::new();
        for _ in 0..10 {
            let one = 1i32.to_ne_bytes().to_vec();
            let mut old = [0i32; 1];
            // SAFETY: one int each.
            unsafe {
                w.get(
                    "fop",
                    old.as_mut_ptr().cast(),
                    1,
                    &t,
                    0,
                    0,
                    1,
                    &t,
                    Some((SUM, INT, one)),
                    None,
                )
            }
            .unwrap();
            w.flush(Some(0)).unwrap();
            seen.push(old[0]);
        }
        assert!(
            seen.windows(2).all(|p| p[0] < p[1]),
            "each fetch saw a later value: {seen:?}"
        );
        let mut old = [-1i32; 1];
        let cmp = 0i32.to_ne_bytes().to_vec();
        let new = (me as i32 + 1).to_ne_bytes().to_vec();
        // SAFETY: one int.
        unsafe {
            w.get(
                "cas",
                old.as_mut_ptr().cast(),
                1,
                &t,
                0,
                1,
                1,
                &t,
                None,
                Some((cmp, new)),
            )
        }
        .unwrap();
        w.unlock_all().unwrap();
        w.fence(0).unwrap();
        if me == 0 {
            assert_eq!(buf[0], 30);
            assert!((1..=3).contains(&buf[1]), "one CAS won: {}", buf[1]);
        }
        w.fence(MPI_MODE_NOSUCCEED).unwrap();
        // Each rank learns whether it won: exactly the winner saw 0.
        assert_eq!(old[0] == 0, me as i32 + 1 == winner(&w), "rank {me}");
        w.free().unwrap();
    });
}

/// The CAS winner, read from rank 0's window.
fn winner(w: &Window) -> i32 {
    w.lock(MPI_LOCK_SHARED, 0).unwrap();
    let mut v = [0i32; 1];
    get(w, &mut v, 0, 1);
    w.unlock(0).unwrap();
    v[0]
}

#[test]
fn errors_name_the_problem() {
    run(2, 1 << 16, |c, me| {
        let mut buf = vec![0i32; 4];
        let w = window(c, me, &mut buf);
        let e = put(&w, &[1], 1 - me, 0).unwrap_err();
        assert_eq!(e.0, MPI_ERR_RMA_SYNC, "{}", e.1);
        w.fence(0).unwrap();
        let e = put(&w, &[1, 2], 1 - me, 3).unwrap_err();
        assert_eq!(e.0, MPI_ERR_RMA_RANGE, "{}", e.1);
        assert!(e.1.contains("outside rank"), "{}", e.1);
        let e = put(&w, &[1], 5, 0).unwrap_err();
        assert_eq!(e.0, MPI_ERR_RANK);
        // SAFETY: nothing is read for MPI_PROC_NULL.
        unsafe {
            w.put(
                "put",
                std::ptr::null(),
                1,
                &int(),
                MPI_PROC_NULL,
                0,
                1,
                &int(),
                None,
            )
        }
        .unwrap();
        assert_eq!(w.lock(99, 0).unwrap_err().0, MPI_ERR_LOCKTYPE);
        w.fence(MPI_MODE_NOSUCCEED).unwrap();
        assert_eq!(w.unlock(0).unwrap_err().0, MPI_ERR_RMA_SYNC);
        w.free().unwrap();
    });
}

/// Accumulate applies the collectives' predefined operations to packed values, the
/// pair types included.
#[test]
fn accumulate_ops() {
    let ints = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_ne_bytes()).collect() };
    let back = |b: &[u8]| -> Vec<i32> {
        b.chunks(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    };
    let mut b = ints(&[2, 3, 4]);
    ops::apply(0x23, &int(), &ints(&[1, -5, 7]), &mut b).unwrap();
    assert_eq!(back(&b), vec![2, 3, 7], "MPI_MAX");
    let two = crate::datatype::lookup(0x22b).unwrap();
    let mut b = ints(&[2, 30, 1, 40]);
    ops::apply(0x38, &two, &ints(&[1, 5, 1, 7]), &mut b).unwrap();
    assert_eq!(
        back(&b),
        vec![1, 5, 1, 7],
        "MPI_MINLOC on MPI_2INT: ties take the lower index"
    );
    let d = crate::datatype::lookup(0x214).unwrap();
    assert_eq!(ops::check(0x28, &d), Err(MPI_ERR_OP), "BAND on doubles");
    assert!(ops::check(0x3c, &d).is_ok() && !ops::valid(0x10005));
}

#[test]
fn post_start_complete_wait_epochs() {
    run(3, 1 << 16, |c, me| {
        let mut buf = vec![0i32; 4];
        let w = window(c, me, &mut buf);
        for round in 1..=5 {
            if me == 0 {
                w.post(&[1, 2]).unwrap();
                if round % 2 == 0 {
                    w.wait_exposure(true).unwrap();
                } else {
                    while !w.wait_exposure(false).unwrap() {
                        std::thread::yield_now();
                    }
                }
                assert_eq!(buf[1..3], [round * 10 + 1, round * 10 + 2], "round {round}");
            } else {
                w.start(&[0]).unwrap();
                put(&w, &[round * 10 + me as i32], 0, me as isize).unwrap();
                w.complete().unwrap();
                let e = put(&w, &[0], 0, 0).unwrap_err();
                assert_eq!(e.0, MPI_ERR_RMA_SYNC, "the access epoch is over");
            }
        }
        assert_eq!(w.complete().unwrap_err().0, MPI_ERR_RMA_SYNC);
        w.free().unwrap();
    });
}

#[test]
fn dynamic_windows_reach_attached_memory() {
    run(2, 1 << 16, |c, me| {
        let ch = Channel {
            p2p: c,
            ranks: vec![0, 1],
            me,
            ctx: 9,
        };
        let w = Window::create(
            ch,
            0,
            isize::MAX as usize,
            1,
            MPI_WIN_FLAVOR_DYNAMIC,
            None,
            0,
        )
        .unwrap();
        let mut mem = vec![0i32; 8];
        let addr = mem.as_mut_ptr() as usize;
        w.attach(addr, 32).unwrap();
        // Swap addresses outside the window (p2p tag 5).
        c.send(1 - me, 5, &(addr as u64).to_le_bytes()).unwrap();
        let mut b = [0u8; 8];
        c.recv(1 - me, 5, &mut b).unwrap();
        let peer = u64::from_le_bytes(b) as isize;
        w.fence(0).unwrap();
        put(&w, &[me as i32 + 7; 2], 1 - me, peer + 8).unwrap();
        w.fence(0).unwrap();
        assert_eq!(mem[2..4], [8 - me as i32, 8 - me as i32]);
        if me == 0 {
            put(&w, &[1], 1, peer + 32).unwrap(); // just past the attached region
        }
        let r = w.fence(0);
        if me == 1 {
            assert_eq!(
                r.unwrap_err().0,
                MPI_ERR_RMA_RANGE,
                "reported by the target"
            );
        } else {
            r.unwrap();
        }
        assert_eq!(w.detach(addr + 4).unwrap_err().0, MPI_ERR_RMA_ATTACH);
        w.detach(addr).unwrap();
        w.fence(MPI_MODE_NOSUCCEED).unwrap();
        w.free().unwrap();
    });
}

#[test]
fn shared_windows_are_loads_and_stores_apart() {
    run(3, 1 << 16, |c, me| {
        let ch = Channel {
            p2p: c,
            ranks: vec![0, 1, 2],
            me,
            ctx: 11,
        };
        // Segments of 12, 0 and 40 bytes.
        let size = [12usize, 0, 40][me as usize];
        let w = allocate_shared(ch, size, 4, 0, true).unwrap();
        let (first, fsize, unit) = w.shared_segment(None).unwrap();
        assert_eq!(
            (fsize, unit),
            (12, 4),
            "rank 0's segment is the first non-empty one"
        );
        let (mine, msize, _) = w.shared_segment(Some(me)).unwrap();
        // An empty segment has no address.
        let base = if size == 0 { 0 } else { w.base() };
        assert_eq!((mine, msize), (base, size));
        w.fence(0).unwrap();
        if me == 2 {
            // A store into rank 0's segment, through this process's mapping.
            // SAFETY: rank 0's segment holds 3 ints; nobody else touches it this epoch.
            unsafe { (first as *mut i32).add(1).write(42) };
        }
        // RMA on a shared window works as on any other.
        if me == 0 {
            put(&w, &[7, 8], 2, 8).unwrap();
        }
        w.fence(0).unwrap();
        // SAFETY: the fence ordered the store before these loads.
        assert_eq!(unsafe { (first as *const i32).add(1).read() }, 42);
        let (two, _, _) = w.shared_segment(Some(2)).unwrap();
        assert_eq!(
            // SAFETY: rank 2's segment holds 10 ints.
            unsafe {
                [
                    (two as *const i32).add(8).read(),
                    (two as *const i32).add(9).read(),
                ]
            },
            [7, 8]
        );
        w.fence(MPI_MODE_NOSUCCEED).unwrap();
        w.free().unwrap();
    });
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("bulkwire-win-{}-", std::process::id()))
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "the mapping's file is removed");
}
