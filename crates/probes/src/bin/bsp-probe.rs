//! A BSP program written against the safe Rust API, for the tests of `bulkwire-bsp`
//! (`tests/bsp.rs`). Run by itself it starts its own job:
//!
//! ```text
//! bsp-probe P sum       every pid puts its pid + 1 into pid 0, which prints the sum
//! bsp-probe P abort     pid 1 aborts: the job stops with its message
//! bsp-probe P spmd      the SPMD part in a function (bulkwire_bsp::init)
//! bsp-probe P steps N   N supersteps: every pid puts a block into every other, checked
//! ```

use bulkwire_bsp::{Bsp, init};
use bulkwire_probes::settings;

fn begin(p: u32) -> Bsp {
    let s = settings();
    Bsp::begin(p, &s.launch, s.bsp).unwrap_or_else(|e| panic!("begin: {e}"))
}

fn sum(p: u32) {
    let mut bsp = begin(p);
    let (p, s) = (bsp.nprocs(), bsp.pid());
    let all = bsp.push_reg(vec![0u32; p as usize]);
    bsp.sync().unwrap_or_else(|e| bsp.fail("bsp_sync", e));
    if let Err(e) = bsp.put(0, &[s + 1], &all, s as usize) {
        bsp.fail("bsp_put", e);
    }
    bsp.sync().unwrap_or_else(|e| bsp.fail("bsp_sync", e));
    if s == 0 {
        let total: u32 = bsp.area(&all).iter().sum();
        assert_eq!(total, p * (p + 1) / 2);
        println!("sum ok p={p} total={total} t={:.3}", bsp.time());
    }
    bsp.end().unwrap_or_else(|e| panic!("end: {e}"));
    println!("after end pid 0");
}

fn abort(p: u32) {
    let mut bsp = begin(p);
    if bsp.pid() == 1 % bsp.nprocs() {
        bsp.abort("the probe gives up");
    }
    loop {
        bsp.sync().unwrap_or_else(|e| bsp.fail("bsp_sync", e));
    }
}

/// Block `pid` puts in superstep `step`: `len` bytes fixed by both.
fn block(step: u32, pid: u32, len: usize) -> Vec<u8> {
    let mut x = (step as u64) << 32 | pid as u64 | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `n` supersteps in which every pid puts a block of 1 B to 4 KiB into its slot of every
/// other pid's area; after each sync every pid checks every slot.
fn steps(p: u32, n: u32) {
    const MAX: usize = 4096;
    let mut bsp = begin(p);
    let (p, s) = (bsp.nprocs(), bsp.pid());
    let area = bsp.push_reg(vec![0u8; p as usize * MAX]);
    bsp.sync().unwrap_or_else(|e| bsp.fail("bsp_sync", e));
    for step in 0..n {
        let len = (step as usize * 997) % MAX + 1;
        for q in (0..p).filter(|&q| q != s) {
            let b = block(step, s, len);
            if let Err(e) = bsp.put(q, &b, &area, s as usize * MAX) {
                bsp.fail("bsp_put", e);
            }
        }
        bsp.sync().unwrap_or_else(|e| bsp.fail("bsp_sync", e));
        let got = bsp.area(&area);
        for q in (0..p).filter(|&q| q != s) {
            let at = q as usize * MAX;
            if got[at..at + len] != block(step, q, len)[..] {
                bsp.abort(&format!("superstep {step}: the block from pid {q} differs"));
            }
        }
    }
    println!("steps ok pid={s} p={p} steps={n} t={:.3}", bsp.time());
    bsp.end().unwrap_or_else(|e| panic!("end: {e}"));
}

static P: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn spmd() {
    sum(P.load(std::sync::atomic::Ordering::SeqCst));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let p = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| settings().launch.available_processors());
    match args.get(1).map(String::as_str) {
        Some("sum") => sum(p),
        Some("abort") => abort(p),
        Some("steps") => steps(
            p,
            args.get(2)
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("usage: bsp-probe P steps N")),
        ),
        Some("spmd") => {
            init(spmd, &settings().launch);
            println!("sequential part");
            P.store(p, std::sync::atomic::Ordering::SeqCst);
            spmd();
        }
        _ => {
            eprintln!("usage: bsp-probe P sum|abort|spmd|steps N");
            std::process::exit(2)
        }
    }
}
