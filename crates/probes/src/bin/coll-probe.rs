//! A job program for the collectives' integration tests. Run it under `bsprun`, or alone:
//! it then starts its own job of `-n` processes (self-spawn).
//!
//! ```text
//! coll-probe [-n N] suite SIZE...   every collective against a serial reference (blocks of
//!                                   SIZE bytes; reductions of 0, 1, 5, 33 and SIZE/8 elements)
//! coll-probe [-n N] big MIB         every collective with MIB-MiB buffers, checked and timed
//! coll-probe [-n N] die             rank 1 is killed while the others wait for it
//! coll-probe [-n N] stop            rank 1 stops (SIGSTOP) while the others wait for it
//! coll-probe [-n N] revoke          single copy agreed, then refused by the kernel
//! ```
//!
//! Results are `key=value` lines on stdout, one per rank.

#[path = "../../../collectives/tests/suite/mod.rs"]
mod suite;

use std::process::exit;
use std::time::{Duration, Instant};

use bulkwire_collectives::{Coll, Op};
use bulkwire_launch::testing;
use bulkwire_p2p::Comm;
use bulkwire_probes::{die, num, say};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut n = 2u32;
    if args.first().map(String::as_str) == Some("-n") {
        n = num(args.get(1), "a process count");
        args.drain(..2);
    }
    let rest = &args[1.min(args.len())..];
    let s = bulkwire_probes::settings();
    let comm = Comm::init_spawn(n, &s.launch, s.p2p).unwrap_or_else(|e| die(e));
    let coll =
        Coll::new(&comm, s.coll).unwrap_or_else(|e| die(format!("rank {}: {e}", comm.rank())));
    let r = match args.first().map(String::as_str) {
        Some("suite") => run_suite(&coll, rest),
        Some("big") => big(&coll, num(rest.first(), "MIB")),
        Some("die") => fail(&coll, false),
        Some("stop") => fail(&coll, true),
        Some("revoke") => revoke(&coll),
        _ => die("usage: coll-probe [-n N] suite SIZE... | big MIB | die | stop | revoke"),
    };
    if let Err(e) = r {
        die(format!("rank {}: {e}", comm.rank()));
    }
    drop(coll);
    if let Err(e) = comm.finalize() {
        die(e);
    }
}

fn run_suite(c: &Coll, sizes: &[String]) -> Result<(), String> {
    let sizes: Vec<usize> = sizes.iter().map(|s| num(Some(s), "a size")).collect();
    let t0 = Instant::now();
    let moved = suite::movement(c, &sizes, 7)?;
    let mut checks = moved.checks;
    let mut counts = vec![0, 1, 5, 33];
    counts.extend(sizes.iter().map(|s| s / 8).filter(|&s| s > 33));
    let reduced = suite::reductions(c, &counts, 7)?;
    checks += reduced.checks;
    checks += suite::misuse(c)?;
    say(format!(
        "suite rank={} checks={checks} netcache={} singlecopy={} sharedcopy={} reducecopy={} \
         ms={}",
        c.comm().rank(),
        c.uses_netcache(),
        moved.single_copy,
        moved.shared_copy,
        reduced.single_copy,
        t0.elapsed().as_millis()
    ));
    Ok(())
}

/// Every collective with `mib` MiB per process (the whole buffer, for the collectives
/// that split it into p blocks), checked against the serial reference.
fn big(c: &Coll, mib: usize) -> Result<(), String> {
    let (me, p) = (c.comm().rank(), c.comm().size());
    let pu = p as usize;
    let total = mib << 20;
    let b = total / pu;
    fn err(w: &'static str) -> impl Fn(bulkwire_collectives::Error) -> String {
        move |e| format!("{w}: {e}")
    }
    let mut times = Vec::new();
    let mut t = Instant::now();
    let mut lap = |name: &str, times: &mut Vec<String>| {
        times.push(format!("{name}_ms={}", t.elapsed().as_millis()));
        t = Instant::now();
    };
    // Broadcast of the whole buffer.
    let want = suite::pat(p - 1, 1, total);
    let mut buf = if me == p - 1 {
        want.clone()
    } else {
        vec![0; total]
    };
    c.broadcast(&mut buf, p - 1).map_err(err("broadcast"))?;
    if buf != want {
        return Err("broadcast: wrong data".into());
    }
    lap("bcast", &mut times);
    drop(want);
    // Allgather and alltoall of p blocks.
    let mine = suite::pat(me, 2, b);
    let mut all = vec![0u8; b * pu];
    c.allgather(&mine, &mut all).map_err(err("allgather"))?;
    for r in 0..p {
        if all[r as usize * b..(r as usize + 1) * b] != suite::pat(r, 2, b)[..] {
            return Err(format!("allgather: block {r} wrong"));
        }
    }
    lap("allgather", &mut times);
    let send: Vec<u8> = (0..p)
        .flat_map(|j| suite::pat(me, 100 + j as u64, b))
        .collect();
    c.alltoall(&send, &mut all).map_err(err("alltoall"))?;
    for i in 0..p {
        if all[i as usize * b..(i as usize + 1) * b] != suite::pat(i, 100 + me as u64, b)[..] {
            return Err(format!("alltoall: block from {i} wrong"));
        }
    }
    lap("alltoall", &mut times);
    // Scatter and gather through rank 0.
    let mut blk = vec![0u8; b];
    c.scatter(&send, &mut blk, 0).map_err(err("scatter"))?;
    if blk != suite::pat(0, 100 + me as u64, b) {
        return Err("scatter: wrong block".into());
    }
    lap("scatter", &mut times);
    c.gather(&mine, &mut all, 0).map_err(err("gather"))?;
    if me == 0 {
        for r in 0..p {
            if all[r as usize * b..(r as usize + 1) * b] != suite::pat(r, 2, b)[..] {
                return Err(format!("gather: block {r} wrong"));
            }
        }
    }
    lap("gather", &mut times);
    drop((send, all, blk, buf));
    // Allreduce and reduce of the whole buffer as f64 (integers: exact sums).
    let k = total / 8;
    let v: Vec<f64> = (0..k).map(|i| ((i + me as usize) % 7) as f64).collect();
    let mut s = vec![0f64; k];
    c.allreduce(&v, &mut s, &Op::Sum)
        .map_err(err("allreduce"))?;
    let ok = |s: &[f64]| {
        s.iter()
            .enumerate()
            .all(|(i, &x)| x == (0..p).map(|r| ((i + r as usize) % 7) as f64).sum::<f64>())
    };
    if !ok(&s) {
        return Err("allreduce: wrong sums".into());
    }
    lap("allreduce", &mut times);
    s.iter_mut().for_each(|x| *x = 0.0);
    c.reduce(&v, &mut s, &Op::Sum, p / 2)
        .map_err(err("reduce"))?;
    if me == p / 2 && !ok(&s) {
        return Err("reduce: wrong sums".into());
    }
    lap("reduce", &mut times);
    say(format!(
        "big rank={me} mib={mib} netcache={} {}",
        c.uses_netcache(),
        times.join(" ")
    ));
    Ok(())
}

/// Rank 1 dies (or stops) 300 ms into a broadcast from it; the others report how long
/// their broadcast took to fail and with what error.
fn fail(c: &Coll, stop: bool) -> Result<(), String> {
    let (me, p) = (c.comm().rank(), c.comm().size());
    if p < 2 {
        return Err("needs 2 processes".into());
    }
    // Warm up: the collectives work.
    let mut buf = vec![me as u8; 1000];
    c.broadcast(&mut buf, 1).map_err(|e| e.to_string())?;
    c.barrier().map_err(|e| e.to_string())?;
    if me == 1 {
        std::thread::sleep(Duration::from_millis(300));
        let sig = if stop { libc_sigstop() } else { 9 };
        // SAFETY: signalling this very process; no memory is involved.
        unsafe { kill(std::process::id() as i32, sig) };
        std::thread::sleep(Duration::from_secs(30));
        return Err("survived its own signal".into());
    }
    let t0 = Instant::now();
    let r = c.broadcast(&mut buf, 1);
    let ms = t0.elapsed().as_millis();
    let e = match r {
        Ok(()) => return Err("the broadcast from a dead root succeeded".into()),
        Err(e) => e,
    };
    say(format!(
        "failed rank={me} ms={ms} peer={:?} netcache={} error={e}",
        e.peer(),
        c.uses_netcache()
    ));
    // The collectives are unusable now, and say so at once.
    match c.barrier() {
        Err(bulkwire_collectives::Error::Broken(_)) => {}
        other => return Err(format!("after a failure, barrier gave {other:?}")),
    }
    if me == 0 {
        // Rank 0 is the launcher under self-spawn: give the others' lines time to be
        // forwarded before its exit ends the job.
        std::thread::sleep(Duration::from_millis(200));
    }
    exit(3)
}

/// Single copy agreed when the `Coll` was made, then refused by the kernel: rank 0 becomes
/// non-dumpable and the others lose CAP_SYS_PTRACE, so nobody may read rank 0's memory.
/// An alltoall of blocks past the single-copy threshold must then fail on every rank,
/// promptly, with an error that names the part, its pid and the size.
fn revoke(c: &Coll) -> Result<(), String> {
    let (me, p) = (c.comm().rank(), c.comm().size() as usize);
    if p < 2 {
        return Err("needs 2 processes".into());
    }
    let b = 64 << 10;
    let send = vec![me as u8; b * p];
    let mut recv = vec![0u8; b * p];
    // Before: the alltoall works, by single copy.
    c.alltoall(&send, &mut recv).map_err(|e| e.to_string())?;
    if c.last_algorithm() != bulkwire_collectives::Algorithm::SingleCopy {
        return Err(format!(
            "alltoall of {b}-byte blocks did not go by single copy"
        ));
    }
    // The collectives read in the calling thread: it is the one that loses the right.
    if me == 0 {
        testing::make_undumpable();
    } else {
        testing::drop_ptrace_capability();
    }
    // Everyone has given up its rights before anyone reads.
    c.barrier().map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let r = c.alltoall(&send, &mut recv);
    let ms = t0.elapsed().as_millis();
    let e = match r {
        Ok(()) => return Err("the alltoall succeeded with single copy refused".into()),
        Err(e) => e,
    };
    say(format!(
        "revoked rank={me} ms={ms} error={}",
        e.to_string().replace('\n', " ")
    ));
    // Stay a while: a process that left at once would make its own part unreadable to
    // those still reading it, and they would report that instead of the cause. (Rank 0
    // is also the launcher under self-spawn, see `fail`.)
    std::thread::sleep(Duration::from_millis(300));
    exit(3)
}

fn libc_sigstop() -> i32 {
    19
}

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}
