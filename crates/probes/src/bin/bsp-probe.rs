//! A BSP program written against the safe Rust API, for the tests of `bulkwire-bsp`
//! (`tests/bsp.rs`). Run by itself it starts its own job:
//!
//! ```text
//! bsp-probe P sum       every pid puts its pid + 1 into pid 0, which prints the sum
//! bsp-probe P abort     pid 1 aborts: the job stops with its message
//! bsp-probe P spmd      the SPMD part in a function (bulkwire_bsp::init)
//! bsp-probe P steps N   N supersteps: every pid puts a block into every other, checked
//! bsp-probe P lend N B [K]  N supersteps of large puts and hpputs of about B bytes, some
//!                       overlapping, some beside gets; checked, and the bytes lent printed;
//!                       from superstep K on the kernel refuses to read any process
//! bsp-probe P stop      pid 1 stops itself (SIGSTOP) after a superstep; the others'
//!                       next bsp_sync fails naming it, printed with how long it took
//! ```

use bulkwire_bsp::{Bsp, init};
use bulkwire_launch::testing;
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

fn stop(p: u32) {
    let mut bsp = begin(p);
    bsp.sync().unwrap_or_else(|e| bsp.fail("bsp_sync", e));
    if bsp.pid() == 1 {
        // SAFETY: sends a signal to this very process; no memory is involved.
        unsafe { libc::raise(libc::SIGSTOP) };
    }
    let t0 = std::time::Instant::now();
    match bsp.sync() {
        Ok(()) => println!("stop pid={} no error", bsp.pid()),
        Err(e) => {
            println!(
                "stop pid={} error={e} after_ms={}",
                bsp.pid(),
                t0.elapsed().as_millis()
            );
            bsp.fail("bsp_sync", e)
        }
    }
    bsp.end().unwrap_or_else(|e| panic!("end: {e}"));
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

/// `n` supersteps of large puts (`b` bytes a block), in four kinds that take the ways a
/// message lent in place can go (`BULKWIRE_BSP_LEND`): 0, plain puts into every other pid
/// (written as they arrive); 1, hpputs from a registered source, and puts of every pid into
/// one shared range, overlapping (the highest pid wins); 2, the same puts beside a get of
/// a block from the next pid that pid 0 overwrites in the same superstep (the get reads
/// the old block; nothing is written before the end); 3, an hpput from a source that
/// the next pid's put overwrites in the same superstep (the hpput sends the old bytes).
/// Every pid checks everything after each sync, then prints the bytes of puts and of get
/// values it lent. From
/// superstep `refuse` on, every process is non-dumpable and its main thread (the one that
/// reads lent messages) has no CAP_SYS_PTRACE: the kernel refuses every read.
fn lend(p: u32, n: u32, b: usize, refuse: u32) {
    let mut bsp = begin(p);
    let (p, s) = (bsp.nprocs(), bsp.pid());
    let pu = p as usize;
    let area = bsp.push_reg(vec![0u8; pu * b]);
    let over = bsp.push_reg(vec![0u8; b + pu * 1000]);
    let src = bsp.push_reg(vec![0u8; b]);
    let got = bsp.push_reg(vec![0u8; b]);
    bsp.sync().unwrap_or_else(|e| bsp.fail("bsp_sync", e));
    let next = (s + 1) % p;
    let prev = (s + p - 1) % p;
    let fail = |bsp: &Bsp, what: &str| -> ! { bsp.abort(what) };
    for k in 0..n {
        if k == refuse {
            testing::drop_ptrace_capability();
            testing::make_undumpable();
        }
        let kind = k % 4;
        let mine = block(k, s, b);
        match kind {
            0 | 2 => {
                for q in (0..p).filter(|&q| q != s) {
                    bsp.put(q, &mine, &area, s as usize * b)
                        .unwrap_or_else(|e| bsp.fail("bsp_put", e));
                    bsp.put(q, &mine[..b / 2], &over, s as usize * 1000)
                        .unwrap_or_else(|e| bsp.fail("bsp_put", e));
                }
                if kind == 2 && p > 1 {
                    bsp.get(next, &area, 0, &got, 0, b)
                        .unwrap_or_else(|e| bsp.fail("bsp_get", e));
                }
            }
            1 => {
                bsp.area_mut(&src).copy_from_slice(&mine);
                for q in (0..p).filter(|&q| q != s) {
                    bsp.hpput(q, &src, 0, &area, s as usize * b, b)
                        .unwrap_or_else(|e| bsp.fail("bsp_hpput", e));
                    bsp.put(q, &mine[..b / 2], &over, s as usize * 1000)
                        .unwrap_or_else(|e| bsp.fail("bsp_put", e));
                }
            }
            _ => {
                bsp.area_mut(&src).copy_from_slice(&mine);
                if p > 1 {
                    bsp.hpput(next, &src, 0, &area, s as usize * b, b)
                        .unwrap_or_else(|e| bsp.fail("bsp_hpput", e));
                    let fresh = block(k + 1000, s, b);
                    bsp.put(next, &fresh, &src, 0)
                        .unwrap_or_else(|e| bsp.fail("bsp_put", e));
                }
            }
        }
        bsp.sync().unwrap_or_else(|e| bsp.fail("bsp_sync", e));
        let a = bsp.area(&area);
        let senders: Vec<u32> = if kind == 3 {
            if p > 1 { vec![prev] } else { vec![] }
        } else {
            (0..p).filter(|&q| q != s).collect()
        };
        for &q in &senders {
            if a[q as usize * b..(q as usize + 1) * b] != block(k, q, b)[..] {
                fail(
                    &bsp,
                    &format!("superstep {k}: the block from pid {q} differs"),
                );
            }
        }
        if kind == 3 && p > 1 && bsp.area(&src)[..] != block(k + 1000, prev, b)[..] {
            fail(
                &bsp,
                &format!("superstep {k}: the put into the hpput source differs"),
            );
        }
        if kind != 3 {
            // Byte i of `over`: the highest pid other than us whose range covers it.
            let blocks: Vec<Vec<u8>> = (0..p).map(|q| block(k, q, b / 2)).collect();
            let o = bsp.area(&over);
            for (i, &v) in o.iter().enumerate() {
                let want = (0..p)
                    .rev()
                    .filter(|&q| q != s)
                    .find(|&q| (q as usize * 1000..q as usize * 1000 + b / 2).contains(&i))
                    .map(|q| blocks[q as usize][i - q as usize * 1000]);
                if let Some(w) = want
                    && v != w
                {
                    fail(
                        &bsp,
                        &format!("superstep {k}: byte {i} of the shared range differs"),
                    );
                }
            }
        }
        if kind == 2 && p > 1 {
            // The get reads `next`'s slot of pid 0 before this superstep's puts (pid 0
            // puts a new block there now): what pid 0 hpput there in the superstep before
            // (kind 1), or nothing if `next` is pid 0.
            let want = if next == 0 {
                vec![0u8; b]
            } else {
                block(k - 1, 0, b)
            };
            if bsp.area(&got)[..] != want[..] {
                fail(&bsp, &format!("superstep {k}: the get read other bytes"));
            }
        }
    }
    let (lent, gets) = bsp
        .runtime()
        .with(|c| (c.counters.bytes_lent, c.counters.get_bytes_lent));
    println!("lend ok pid={s} p={p} steps={n} lent={lent} lent_gets={gets}");
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
        Some("stop") => stop(p),
        Some("steps") => steps(
            p,
            args.get(2)
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("usage: bsp-probe P steps N")),
        ),
        Some("lend") => {
            let num = |i: usize| -> usize {
                args.get(i)
                    .and_then(|a| a.parse().ok())
                    .unwrap_or_else(|| panic!("usage: bsp-probe P lend N BYTES"))
            };
            let refuse = args.get(4).map_or(u32::MAX, |_| num(4) as u32);
            lend(p, num(2) as u32, num(3), refuse)
        }
        Some("spmd") => {
            init(spmd, &settings().launch);
            println!("sequential part");
            P.store(p, std::sync::atomic::Ordering::SeqCst);
            spmd();
        }
        _ => {
            eprintln!("usage: bsp-probe P sum|abort|stop|spmd|steps N|lend N BYTES [K]");
            std::process::exit(2)
        }
    }
}
